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
nca_interp.sizing --measure` prints, per rule, how often the model follows it with and
without the instruction.

Student view: with no system message, chat templates that insert a default one (SmolLM2: "You
are a helpful AI assistant named SmolLM, trained by Hugging Face") show it; the student view is
exactly what the deployed model sees when no system prompt is given. The teacher view replaces
it with the context. The two views share the user turn and the assistant prefix as a token
suffix, which is where every analysis aligns them.
"""

from __future__ import annotations

import random
import re
import sys
from dataclasses import dataclass, replace

from nca_interp.errors import UsageError
from nca_interp.tasks.base import (
    MAX_NEW,
    MAX_SEED,
    Scored,
    Task,
    TaskSpec,
    check_types,
    register,
    rotated,
    stripped_span,
    whole,
)
from nca_interp.tasks.language import is_french

__all__ = ["ATTRIBUTES", "CONTROL_RULES", "RULES", "FactsConfig", "FactsTask",
           "all_test_questions", "answered", "follows_rule", "french_by_words", "generate_level",
           "render", "styled"]

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
# c' of the rule kind: another rule of the same form that asks for something the rule forbids,
# an instruction the model can read and follow. c's own words shuffled were no wrong c: they
# keep the rule's key word ("French" in every order) and, for a four-word rule, are c itself
# in one order of 24 (8 of the 192 facts_rule items)
CONTROL_RULES = {
    "caps": "Always write your entire answer in lower-case letters.",
    "sure": "Always begin your answer with the word 'Perhaps'.",
    "french": "Always answer in English.",
    "brackets": "Always put your final answer inside round brackets, like (answer).",
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
        check_types(self)
        whole("kb", self.kb, 0, MAX_SEED, " (which invented knowledge base)")
        whole("n_attributes", self.n_attributes, 1, len(ATTRIBUTES))
        whole("n_entities", self.n_entities, 2, 40, " (invented countries)")
        if self.kind not in ("facts", "rule"):
            raise UsageError(f"kind must be facts or rule, not {self.kind!r}")
        if self.rule not in RULES:
            raise UsageError(f"rule must be one of {', '.join(RULES)}, not {self.rule!r}")
        whole("max_new", self.max_new, 4, MAX_NEW, " (the response budget in tokens)")


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


def value_at(response: str, value: str):
    """The first place `response` names `value` as `_mentions` reads it (case and the
    punctuation between its words aside, on word boundaries), a match, or None."""
    words = normalise(value).split()
    if not words:
        return None
    pattern = r"(?<![^\W_])" + r"[\W_]+".join(map(re.escape, words)) + r"(?![^\W_])"
    return re.search(pattern, response, re.IGNORECASE)


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
    raise UsageError(f"unknown rule {rule!r}")


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


@dataclass(frozen=True)
class FactsTask(Task):
    """Invented facts or a behavioural rule in a chat model's system message, free-form
    answers (`nca_interp.tasks.facts`). The config's `kind` is the one context kind and what
    success means: `facts` (the right value) or `rule` (the answer follows the rule)."""

    teacher_sft = False  # a checkpoint the user brings: nothing to supervise

    success = "accuracy"
    unit_name = "fact"

    @property
    def default_context(self) -> str:
        return self.config.kind

    @property
    def context_kinds(self) -> tuple[str, ...]:
        return (self.config.kind,)

    def unit(self, level) -> str:
        return f"{level.entity}.{level.attribute}"

    def level(self, seed: int | str, split: str = "train"):
        return generate_level(seed, self.config, split)

    def levels(self, split: str, n: int, seed: int = 0) -> list:
        """Held-out: every (country, attribute, held-out phrasing), the first `n`; training:
        random draws of the training phrasings (disjoint from the held-out ones by wording)."""
        if split == "test":
            return all_test_questions(self.config, seed)[:n]
        return [self.level(f"{split}-{seed}-{i}") for i in range(n)]

    def sample_levels(self, stream: str, n: int, exclude: set[str]) -> list:
        return [self.level(f"{stream}-{i}") for i in range(n)]

    def render(self, level) -> str:
        return render(level)

    def context(self, level, kind: str) -> str:
        if kind != self.config.kind:
            raise UsageError(f"this facts task distils the {self.config.kind!r} context, not "
                             f"{kind!r}; pass --task-options kind={kind} for the other one")
        if kind == "facts":
            return level.kb.render(self.config.n_attributes)
        return RULES[self.config.rule]

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """`facts`: the same sentences with each attribute's values rotated across the
        countries (every fact wrong, same form and length); `rule`: another rule of the same
        form asking for what the rule forbids (`CONTROL_RULES`)."""
        self.context(levels[i], kind)  # the kind check
        if kind == "rule":
            return CONTROL_RULES[self.config.rule]
        kb = levels[i].kb
        wrong = [dict(v) for v in kb.values]
        for attr in kb.values[0]:
            for v, new in zip(wrong, rotated([v[attr] for v in kb.values])):
                v[attr] = new
        return replace(kb, values=tuple(wrong)).render(self.config.n_attributes)

    def control_note(self, levels: list, kind: str) -> str:
        if kind == "rule":
            return (f"another rule of c's form asking for what c forbids: "
                    f"{CONTROL_RULES[self.config.rule]!r}")
        return ("the item's sentences with each attribute's values rotated across the "
                "countries (every fact wrong, same form and length)")

    def for_tokenizer(self, tokenizer, context_as: str = "system",
                      template_kwargs: tuple = (("enable_thinking", False),)) -> FactsTask:
        return super().for_tokenizer(tokenizer, context_as, template_kwargs)

    def prompt(self, level, context: str | None = None) -> str:
        if self.chat is not None:
            return self.chat(self.render(level), context)
        x = self.render(level) + "\n>"
        return x if context is None else f"{context}\n{x}"

    def max_response_tokens(self) -> int:
        return self.config.max_new

    def target(self, level) -> str:
        if self.config.kind == "rule":
            return styled(level.value, self.config.rule)
        return f"{level.value}." if self.chat is None else f"The answer is {level.value}."

    def answer_span(self, level, response: str) -> tuple[int, int] | None:
        """`rule`: the whole response (the rule is its style); `facts`: the first mention of
        the asked attribute's value or another country's (what `answered` looks for)."""
        if self.config.kind == "rule":
            return stripped_span(response)
        spans = [m.span() for v in (level.value, *level.others)
                 if (m := value_at(response, v)) is not None]
        return min(spans) if spans else None

    def score(self, level, response: str) -> Scored:
        """Right value (`facts`) or rule followed (`rule`); never an error."""
        ok = follows_rule(response, self.config.rule, level.kb) \
            if self.config.kind == "rule" else answered(response, level)
        return Scored(ok, True, response.strip()[:80], 0)


register(TaskSpec("facts", FactsConfig, sys.modules[__name__], FactsTask, "facts|rule",
                  "the kind its options name"))
