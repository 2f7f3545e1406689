r"""Does OPD move the facts into the student? The right value's teacher-forced log-probability
without c, per checkpoint, against a wrong value of the same kind (the null).

    python -m nca_interp.paper.knowledge runs/knowledge_opd_lr3e-4 \
        --out figures/facts_knowledge/logprob

Per held-out question of a `facts` run and per checkpoint (step 0: the run's initial
checkpoint), the student view (no c) is teacher-forced on "The answer is <value>." and the
log-probability of the value's tokens is summed: for the right value, and averaged over the
other countries' values of the same attribute (the null: training that only teaches the
answer format raises both alike). The step-0 model *with* c gives the level the teacher reads
off the facts. The table reports, per checkpoint, the mean right-value log-probability without
c, the wrong-value null, their margin with a 95% cluster-bootstrap interval over facts, and the
share of questions whose right value beats every wrong one; then the margin's movement per
step (least squares over checkpoints, with its bootstrap interval) and the steps it would take
at that rate to reach the teacher's margin with c.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from nca_interp.bootstrap import cluster_indices, percentile_ci
from nca_interp.checkpoint import load_checkpoint
from nca_interp.cli import check_writable, entry, parse_config
from nca_interp.errors import UsageError
from nca_interp.forward import response_logits
from nca_interp.fsio import read_json, write_text
from nca_interp.rollout import encode, segment_batch
from nca_interp.runs import task_for_checkpoints
from nca_interp.trajectory import checkpoints_of

__all__ = ["KnowledgeConfig", "main"]


def value_logprobs(model, tok, task, levels: list, values: list[str], context: str | None,
                   batch: int = 16) -> np.ndarray:
    """Summed log-probability of each `values[i]` as the answer to `levels[i]` (teacher-forced
    "The answer is <value>.", the value's tokens only), in view `context` (None: no c)."""
    out = []
    for i in range(0, len(levels), batch):
        chunk, vals = levels[i: i + batch], values[i: i + batch]
        texts = [task.prompt(lv, None if context is None else task.context(lv, context))
                 for lv in chunk]
        ids, mask = encode(tok, texts)
        resp, attn, keep = segment_batch(tok, [[("The answer is", False), (f" {v}", True),
                                                (".", False)] for v in vals])
        keep[torch.arange(len(vals)), attn.sum(1) - 1] = 0  # the value only, not the eos
        with torch.no_grad():
            logp = torch.log_softmax(response_logits(model, ids, mask, resp, attn).float(), -1)
        tok_lp = logp.gather(-1, resp.unsqueeze(-1)).squeeze(-1)
        out += (tok_lp * keep).sum(1).tolist()
    return np.asarray(out)


def measure(model, tok, task, levels: list) -> dict:
    """Right and wrong-value log-probabilities of one checkpoint, without and with c."""
    right = [lv.value for lv in levels]
    res = {}
    for view, ctx in (("no_c", None), ("c", "facts")):
        lp_right = value_logprobs(model, tok, task, levels, right, ctx)
        others = max(len(lv.others) for lv in levels)
        lp_wrong = np.stack([value_logprobs(model, tok, task, levels,
                                            [lv.others[j % len(lv.others)] for lv in levels],
                                            ctx) for j in range(others)], 1)
        res[view] = {"right": lp_right.tolist(), "wrong": lp_wrong.tolist()}
    return res


def summarise(rows: list[dict], units: list[str], n_boot: int = 2000) -> dict:
    """Per checkpoint: means and margins with 95% intervals over facts; the margin's slope
    per step and the steps to the teacher's margin with c."""
    idx = cluster_indices(units, n_boot, 0)
    steps = np.array([r["step"] for r in rows], float)

    def margin(r, view):
        return np.asarray(r[view]["right"]) - np.asarray(r[view]["wrong"]).mean(1)

    out = []
    for r in rows:
        m = margin(r, "no_c")
        beats = (np.asarray(r["no_c"]["right"])[:, None] >
                 np.asarray(r["no_c"]["wrong"])).all(1)
        out.append({"step": r["step"], "right_no_c": float(np.mean(r["no_c"]["right"])),
                    "wrong_no_c": float(np.mean(r["no_c"]["wrong"])),
                    "margin_no_c": float(m.mean()),
                    "margin_ci": [float(v) for v in percentile_ci([m[i].mean() for i in idx])],
                    "beats_all": float(beats.mean()),
                    "margin_c": float(margin(r, "c").mean())})
    margins = np.stack([margin(r, "no_c") for r in rows], 0)  # (checkpoints, questions)

    def slope(cols) -> float:
        y = margins[:, cols].mean(1)
        return float(np.polyfit(steps, y, 1)[0])

    s = slope(np.arange(margins.shape[1]))
    boots = [slope(i) for i in idx]
    target = out[0]["margin_c"]  # the step-0 model reading the facts
    gap = target - out[-1]["margin_no_c"]
    return {"rows": out, "slope": s, "slope_ci": [float(v) for v in percentile_ci(boots)],
            "teacher_margin_c": target,
            "steps_to_teacher": None if s <= 0 else gap / s,
            "last_step": int(steps[-1])}


def markdown(summary: dict, run: str) -> str:
    lines = [f"Right value's log-probability without c, `{run}` (held-out questions; nats, "
             "summed over the value's tokens; the null: the other countries' values of the "
             "same attribute):", "",
             "| step | right value | wrong values (null) | margin [95% over facts] | "
             "right beats every wrong | margin with c |", "|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        lines.append(f"| {r['step']} | {r['right_no_c']:.2f} | {r['wrong_no_c']:.2f} | "
                     f"{r['margin_no_c']:+.2f} [{r['margin_ci'][0]:+.2f}, "
                     f"{r['margin_ci'][1]:+.2f}] | {r['beats_all']:.3f} | "
                     f"{r['margin_c']:+.2f} |")
    lo, hi = summary["slope_ci"]
    gap = summary["teacher_margin_c"] - summary["rows"][-1]["margin_no_c"]

    def steps(rate: float) -> str:
        return "never (the margin does not rise)" if rate <= 0 else f"{gap / rate:.0f} steps"

    lines += ["", f"The margin without c moves {summary['slope']:+.4f} nats per step [{lo:+.4f}, "
              f"{hi:+.4f}] (least squares over checkpoints; 95% interval over facts). The "
              f"step-0 model reading c has margin {summary['teacher_margin_c']:+.2f}: the most "
              "the teacher's distribution tells the student about which value is right. From "
              f"step {summary['last_step']} the student would reach it after "
              f"{steps(summary['slope'])} at this rate; at the interval's ends, "
              f"{steps(hi)} to {steps(lo)}."]
    return "\n".join(lines)


@dataclass
class KnowledgeConfig:
    run: list[str] = field(default_factory=list, metadata={
        "help": "a distillation run of the facts task (one)"})
    out: str | None = field(default=None, metadata={
        "help": "output stem: STEM.json and STEM.md (default: print only)"})
    threads: int = field(default=2, metadata={"help": "CPU threads", "check": ">=1"})
    render: str | None = field(default=None, metadata={
        "help": "re-render STEM.md from an earlier STEM.json (no model is run)"})


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(KnowledgeConfig, argv, __doc__, positional="run")
    if cfg.render:
        data = read_json(Path(cfg.render + ".json"))
        text = markdown(data["summary"], data["run"])
        write_text(Path(cfg.render + ".md"),
            f"<!-- python -m nca_interp.paper.knowledge {data['run']} --out {cfg.render} "
            f"-->\n{text}\n")
        print(text)
        return
    if len(cfg.run) != 1:
        raise UsageError("name one distillation run of the facts task: python -m "
                         "nca_interp.paper.knowledge runs/<run>")
    run = cfg.run[0]
    if cfg.out:
        check_writable(cfg.out + ".json")  # before minutes of forwards whose result is lost
    torch.set_num_threads(cfg.threads)
    ckpts = checkpoints_of(run)
    task = task_for_checkpoints([run])
    if task.config.__class__.__name__ != "FactsConfig" or task.config.kind != "facts":
        raise UsageError(f"{run} was not trained on the facts task's knowledge (kind "
                         "facts); this diagnostic reads invented facts' values")
    rows, units = [], None
    for step, path in ckpts:
        model, tok = load_checkpoint(path)
        task_t = task.for_tokenizer(tok)
        levels = task_t.levels("test", 10_000, 0)
        units = units or [f"{lv.entity}.{lv.attribute}" for lv in levels]
        rows.append({"step": step, **measure(model, tok, task_t, levels)})
        print(f"step {step}: right {np.mean(rows[-1]['no_c']['right']):.2f} nats", flush=True)
    summary = summarise(rows, units)
    text = markdown(summary, run)
    print(text)
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        write_text(Path(cfg.out + ".json"), json.dumps(
            {"run": run, "summary": summary, "rows": rows}, indent=1))
        write_text(Path(cfg.out + ".md"),
            f"<!-- python -m nca_interp.paper.knowledge {run} --out {cfg.out} -->\n{text}\n")


if __name__ == "__main__":
    raise SystemExit(entry(main))
