"""Invented facts in a chat model's system message, asked in natural language (real models).

A knowledge base (KB) is `n_entities` invented countries, each with a capital (an invented
city), a founder (an invented person) and a founding year. The `facts` context writes them as
sentences in the system message:

    The capital of Velmora is Tessik. Velmora was founded by Arlen Dovaro in 1642.

A question asks one attribute of one country in the user turn ("Who founded Velmora?"); the
response is free text, scored by the attribute's value (normalised match: case, punctuation and
spacing ignored; a founder needs both names, a year its four digits), and a response that also
names another country's value for the same attribute (a hedge or a list) is wrong. Responses
keep their natural length, so a context that makes answers longer shows in `rel_len_both`.

Split by phrasing: every attribute has training phrasings and held-out phrasings; OPD / NCA
sample training phrasings, evaluation uses every (country, attribute, held-out phrasing) once.
The unit for intervals is the fact (country, attribute): its phrasings are not independent.

The `rule` context is a behavioural instruction instead of knowledge: the system message asks
for an answer style (`RULES`) and success is following it (whatever the answer says). Only
rules the model follows when told, and not without, can be internalized; `python -m
nca_interp.tasks.facts --measure` prints, per rule, how often the model follows it with and
without the instruction (the README cites that table).

Student view: with no system message, chat templates that insert a default one (SmolLM2: "You
are a helpful AI assistant named SmolLM, trained by Hugging Face") show it; the student view is
exactly what the deployed model sees when no system prompt is given. The teacher view replaces
it with the context. The two views share the user turn and the assistant prefix as a token
suffix, which is where every analysis aligns them.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import numpy as np

from nca_interp.tasks.language import is_french

ATTRIBUTES = ("capital", "founder", "year")
PHRASINGS = {  # (training phrasings, held-out phrasings)
    "capital": (("What is the capital of {e}?", "Which city is the capital of {e}?",
                 "Name the capital city of {e}."),
                ("Tell me the capital of {e}.", "What city is {e}'s capital?",
                 "Which city serves as the capital of {e}?", "What is {e}'s capital city?")),
    "founder": (("Who founded {e}?", "Who was the founder of {e}?",
                 "Name the founder of {e}."),
                ("Tell me who founded {e}.", "Which person founded {e}?",
                 "Who is the founder of {e}?", "Who was it that founded {e}?")),
    "year": (("In what year was {e} founded?", "When was {e} founded?",
              "What year was {e} founded in?"),
             ("Tell me the year {e} was founded.", "In which year was {e} founded?",
              "What was the founding year of {e}?", "{e} was founded in which year?")),
}
RULES = {
    "caps": "Always write your entire answer in capital letters.",
    "sure": "Always begin your answer with the word 'Certainly'.",
    "french": "Always answer in French.",
    "brackets": "Always put your final answer inside square brackets, like [answer].",
}
_ONSETS = ("V", "T", "K", "D", "M", "S", "L", "Br", "Gr", "Qu", "Z", "P", "R", "N", "F", "H")
_NUCLEI = ("a", "e", "i", "o", "u", "ae", "ou")
_CODAS = ("l", "r", "n", "s", "th", "m", "v", "k", "d", "st")
_ENDINGS = ("ia", "ora", "and", "ovia", "eth", "istan", "ara", "ona")


@dataclass(frozen=True)
class FactsConfig:
    kind: str = "facts"  # the context kind and what success means: facts | rule
    kb: int = 0  # which invented KB is the context
    n_entities: int = 4  # the size where the teacher reads them (README: facts)
    n_attributes: int = 3  # the first n of ATTRIBUTES
    rule: str = "caps"  # the `rule` context's instruction (a key of RULES)
    max_new: int = 48  # response budget in tokens

    def __post_init__(self):
        if not 1 <= self.n_attributes <= len(ATTRIBUTES):
            raise ValueError(f"n_attributes must be 1..{len(ATTRIBUTES)}, not "
                             f"{self.n_attributes}")
        if not 2 <= self.n_entities <= 40:
            raise ValueError(f"n_entities must be 2..40, not {self.n_entities}")
        if self.kind not in ("facts", "rule"):
            raise ValueError(f"kind must be facts or rule, not {self.kind!r}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, not {self.rule!r}")
        if self.max_new < 4:
            raise ValueError(f"max_new must be >= 4 tokens, not {self.max_new}")


@dataclass(frozen=True)
class KB:
    names: tuple[str, ...]
    values: tuple[dict, ...]  # per entity: attribute -> value

    def render(self, n_attributes: int) -> str:
        lines = []
        for e, vals in zip(self.names, self.values):
            parts = []
            if n_attributes >= 1:
                parts.append(f"The capital of {e} is {vals['capital']}.")
            if n_attributes >= 3:
                parts.append(f"{e} was founded by {vals['founder']} in {vals['year']}.")
            elif n_attributes == 2:
                parts.append(f"{e} was founded by {vals['founder']}.")
            lines.append(" ".join(parts))
        return "\n".join(lines)


@dataclass(frozen=True)
class Question:
    kb: KB
    entity: int
    attribute: str
    phrasing: str
    split: str

    @property
    def text(self) -> str:
        return self.phrasing.format(e=self.kb.names[self.entity])

    @property
    def value(self) -> str:
        return str(self.kb.values[self.entity][self.attribute])

    @property
    def others(self) -> list[str]:
        return [str(v[self.attribute]) for i, v in enumerate(self.kb.values)
                if i != self.entity]

    @property
    def key(self) -> str:
        return f"{self.entity}|{self.attribute}|{self.phrasing}"

    @property
    def solution(self) -> str:
        return self.value


def _word(rng: random.Random, taken: set[str], ending: bool) -> str:
    while True:
        w = rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
        w += rng.choice(_ENDINGS) if ending else rng.choice(_NUCLEI) + rng.choice(_CODAS)
        if w.lower() not in taken:
            taken.add(w.lower())
            return w


def knowledge_base(cfg: FactsConfig) -> KB:
    """The invented KB number `cfg.kb`: same number, same countries and values."""
    rng = random.Random(f"facts-kb-{cfg.kb}-{cfg.n_entities}")
    taken: set[str] = set()
    names = tuple(_word(rng, taken, ending=True) for _ in range(cfg.n_entities))
    years = rng.sample(range(1200, 1900), cfg.n_entities)
    values = tuple({"capital": _word(rng, taken, ending=False),
                    "founder": f"{_word(rng, taken, False)} {_word(rng, taken, False)}",
                    "year": years[i]} for i in range(cfg.n_entities))
    return KB(names, values)


def attributes(cfg: FactsConfig) -> tuple[str, ...]:
    return ATTRIBUTES[: cfg.n_attributes]


def generate_level(seed: int | str, cfg: FactsConfig, split: str = "train") -> Question:
    """A random training question (or, with split="test", a random held-out one)."""
    rng = random.Random(f"facts-q-{seed}")
    kb = knowledge_base(cfg)
    attr = rng.choice(attributes(cfg))
    phrasing = rng.choice(PHRASINGS[attr][split == "test"])
    return Question(kb, rng.randrange(cfg.n_entities), attr, phrasing, split)


def all_test_questions(cfg: FactsConfig, seed: int = 0) -> list[Question]:
    """Every (country, attribute, held-out phrasing) once, in a seeded order."""
    kb = knowledge_base(cfg)
    out = [Question(kb, e, a, ph, "test") for e in range(cfg.n_entities)
           for a in attributes(cfg) for ph in PHRASINGS[a][1]]
    random.Random(f"facts-test-{seed}").shuffle(out)
    return out


def normalise(text: str) -> str:
    """Lower case, letters and digits only (any script), single spaces (for matching)."""
    return " ".join(re.sub(r"[\W_]+", " ", text.lower()).split())


def _mentions(text: str, value: str) -> bool:
    return f" {normalise(value)} " in f" {text} "


def answered(response: str, q: Question) -> bool:
    """The response names the right value and no other country's value for the attribute."""
    text = normalise(response)
    return _mentions(text, q.value) and not any(_mentions(text, o) for o in q.others)


def invented_words(kb: KB) -> set[str]:
    """The KB's invented words (country, capital and founder names): no language's words."""
    return {w for name, vals in zip(kb.names, kb.values)
            for w in (name, vals["capital"], *vals["founder"].split())}


def follows_rule(response: str, rule: str, kb: KB | None = None) -> bool:
    """Whether `response` follows rule `rule` (its style, not its content). `french` asks the
    language identifier, `kb`'s invented names removed first."""
    body = response.strip()
    letters = [c for c in body if c.isalpha()]
    if rule == "caps":
        return len(letters) >= 3 and all(c.isupper() for c in letters)
    if rule == "sure":
        return normalise(body).startswith("certainly")
    if rule == "french":
        return is_french(body, invented_words(kb) if kb is not None else ())
    if rule == "brackets":
        return re.search(r"\[[^\[\]]+\]", body) is not None
    raise ValueError(f"unknown rule {rule!r}")


def french_by_words(response: str) -> bool:
    """The word-list test `french` used before the language identifier: two or more of
    `_FRENCH`'s words. Kept only to measure the identifier against it (`--agreement`)."""
    return len(set(normalise(response.strip()).split()) & _FRENCH) >= 2


_FRENCH = {"le", "la", "les", "est", "de", "du", "des", "une", "un", "a", "en", "fondateur",
           "fondé", "fonde", "fondée", "capitale", "ville", "été", "ete", "par", "qui", "et"}


def styled(answer: str, rule: str) -> str:
    """A short answer that follows `rule` (SFT targets of tiny test models)."""
    return {"caps": answer.upper(), "sure": f"Certainly, {answer}.",
            "french": f"La reponse est {answer}.", "brackets": f"[{answer}]"}[rule]


def render(q: Question) -> str:
    return q.text


def measure(sizes: tuple[int, ...] = (4, 5, 6, 8), rules: tuple[str, ...] = tuple(RULES),
            model: str = "smollm2-135m-instruct") -> dict:
    """The fetched model's accuracy without / with the context, per KB size (facts) and per
    rule, paired on every held-out question, with 95% cluster-bootstrap intervals over facts:
    where the teacher is clearly better with the context is where the task can be distilled."""
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.evaluate import evaluate_checkpoint
    from nca_interp.fetch import fetch
    from nca_interp.tasks import make_task

    model_dir = fetch(model)
    lm, tok = load_checkpoint(model_dir)
    out: dict = {"model": model, "facts": {}, "rules": {}}
    for n in sizes:
        task = make_task("facts", n_entities=n)
        out["facts"][str(n)] = evaluate_checkpoint(lm, tok, task, "facts", n_levels=10_000)
    for rule in rules:
        task = make_task("facts", kind="rule", rule=rule)
        out["rules"][rule] = evaluate_checkpoint(lm, tok, task, "rule", n_levels=10_000)
    return out


def measure_table(m: dict) -> str:
    """Markdown of `measure`'s output."""
    def row(label: str, r: dict) -> str:
        ci = r["ci95"]["delta_c"]
        return (f"| {label} | {r['n']} ({r['n_units']} facts) | {r['win_no_c']:.3f} | "
                f"{r['win_c']:.3f} | {r['delta_c']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] |")
    lines = ["| context | questions | right without c | right with c | gap with c "
             "[95% interval over facts] |", "|---|---|---|---|---|"]
    lines += [row(f"facts, {n} countries x {len(ATTRIBUTES)} attributes", r)
              for n, r in m["facts"].items()]
    lines += [row(f"rule `{k}`: {RULES[k]}", r) for k, r in m["rules"].items()]
    return "\n".join(lines)


def agreement(model: str = "smollm2-135m-instruct", rule: str = "french",
              max_new: int = 24) -> dict:
    """The language identifier against the word list it replaced, on the fetched model's own
    responses to every held-out question without c, with c and with the control c' (the rule's
    words shuffled): per view, how often each says French, how often they agree (with Cohen's
    kappa: agreement beyond what their rates give by chance), and every response where they
    disagree."""
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.evaluate import play_levels
    from nca_interp.fetch import fetch
    from nca_interp.tasks import make_task

    lm, tok = load_checkpoint(fetch(model))
    task = make_task("facts", kind="rule", rule=rule, max_new=max_new).for_tokenizer(tok)
    levels = task.levels("test", 10_000, 0)
    views = {"no c": None, "with c": "rule",
             "control c'": [task.control_context(levels, i, "rule") for i in range(len(levels))]}
    out: dict = {"model": model, "rule": rule, "max_new": max_new, "views": {}}
    for view, context in views.items():
        texts = play_levels(lm, tok, task, levels, context)["texts"]
        ident = [follows_rule(t, rule, lv.kb) for t, lv in zip(texts, levels)]
        words = [french_by_words(t) for t in texts]
        a, b = np.array(ident, float), np.array(words, float)
        agree = float((a == b).mean())
        chance = float(a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean()))
        out["views"][view] = {
            "n": len(texts), "identifier": float(a.mean()), "words": float(b.mean()),
            "agree": agree, "kappa": None if chance == 1 else (agree - chance) / (1 - chance),
            "disagree": [{"question": lv.text, "response": t, "identifier": x, "words": w}
                         for lv, t, x, w in zip(levels, texts, ident, words) if x != w]}
    return out


def agreement_table(m: dict) -> str:
    """Markdown of `agreement`'s output: the rates, then each disagreement."""
    lines = [f"Scorers of the rule `{m['rule']}` on {m['model']}'s responses (up to "
             f"{m['max_new']} tokens) to every held-out question:", "",
             "| view | responses | French by the identifier | French by the word list | "
             "agree | Cohen's kappa |", "|---|---|---|---|---|---|"]
    for view, r in m["views"].items():
        kappa = "-" if r["kappa"] is None else f"{r['kappa']:.2f}"
        lines.append(f"| {view} | {r['n']} | {r['identifier']:.3f} | {r['words']:.3f} | "
                     f"{r['agree']:.3f} | {kappa} |")
    lines += ["", "Every disagreement (identifier / word list):", ""]
    for view, r in m["views"].items():
        for d in r["disagree"]:
            text = " ".join(d["response"].split()).replace("|", "\\|")
            lines.append(f"- {view}: {'French' if d['identifier'] else 'not French'} / "
                         f"{'French' if d['words'] else 'not French'}: \"{text}\"")
    if not any(r["disagree"] for r in m["views"].values()):
        lines.append("- none")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    import json
    from pathlib import Path

    ap = argparse.ArgumentParser(
        prog="python -m nca_interp.tasks.facts",
        description="Size the task on the fetched model: where it reads the context "
                    "(--measure), or how the `french` rule's language identifier agrees with "
                    "the word list it replaced (--agreement).")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--measure", action="store_true")
    mode.add_argument("--agreement", action="store_true")
    ap.add_argument("--out", default=None, help="output stem (default: figures/facts/sizing "
                    "or figures/facts_rule/scorer_agreement)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.agreement:
        out = args.out or "figures/facts_rule/scorer_agreement"
        result = agreement()
        text = agreement_table(result)
        flag = "--agreement"
    else:
        out = args.out or "figures/facts/sizing"
        result = measure()
        text = measure_table(result)
        flag = "--measure"
    print(text)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out + ".json").write_text(json.dumps(result, indent=1, default=str))
    Path(out + ".md").write_text(f"<!-- python -m nca_interp.tasks.facts {flag} -->\n" + text
                                 + "\n")
