"""Sizing the `facts` task on a fetched model, a step above the task itself (it evaluates).

    python -m nca_interp.sizing --measure     # figures/facts/sizing.{md,json}
    python -m nca_interp.sizing --agreement   # figures/facts_rule/scorer_agreement.{md,json}

`--measure`: the model's accuracy without / with the context per knowledge-base size and per
rule, paired on every held-out question; the task uses a size (and a rule) where the teacher is
clearly better with the context. `--agreement`: the `french` rule's language identifier against
the word list it replaced, on the model's own responses.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import numpy as np

from nca_interp.fsio import write_text
from nca_interp.tasks.facts import ATTRIBUTES, RULES, follows_rule, french_by_words

__all__ = ["agreement_table"]


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
        return (f"| {label} | {r['n']} ({r['n_units']} facts) | {r['correct_no_c']:.3f} | "
                f"{r['correct_c']:.3f} | {r['delta_c']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] |")
    lines = ["| context | questions | right without c | right with c | gap with c "
             "[95% interval over facts] |", "|---|---|---|---|---|"]
    lines += [row(f"facts, {n} countries x {len(ATTRIBUTES)} attributes", r)
              for n, r in m["facts"].items()]
    lines += [row(f"rule `{k}`: {RULES[k]}", r) for k, r in m["rules"].items()]
    return "\n".join(lines)


def agreement(model: str = "smollm2-135m-instruct", rule: str = "french",
              max_new: int = 24) -> dict:
    """The language identifier against the word list it replaced, on the fetched model's own
    responses to every held-out question without c, with c and with the control c' (another
    rule of c's form, `facts.CONTROL_RULES`): per view, how often each says French, how often
    they agree (with Cohen's
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

    from nca_interp.cli import started

    started()

    ap = argparse.ArgumentParser(
        prog="python -m nca_interp.sizing",
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
    write_text(Path(out + ".json"), json.dumps(result, indent=1, default=str))
    write_text(Path(out + ".md"), f"<!-- python -m nca_interp.sizing {flag} -->\n" + text
                                 + "\n")
