"""A context-return monitor for any Hugging Face / TRL trainer.

    from nca_interp.trl_callbacks import ContextReturnCallback
    from nca_interp.tasks import make_task

    task = make_task("jsonl", data="mine.jsonl", scorer="startswith", pattern="Ahoy")
    trainer.add_callback(ContextReturnCallback(task, every=50, n_items=64, trainer=trainer))

Every `every` optimizer steps the live student answers a fixed set of held-out items greedily,
without c, with c and with a wrong c (the task's control), and the callback logs through the
trainer's loggers (`trainer.log`: the console, TensorBoard, W&B, `state.log_history`), under
`context_return/`: accuracy both ways, harm with its independence baseline (1 - accuracy with
c: what harm would be if c scrambled answers independently of x), help, the regime, reads_c
(accuracy with c minus with the wrong c), the mean token KL(g(.|x) || g(.|x,c)) on the
no-context responses, and the relative length change. The same items and greedy decoding each
time, so two logs compare; the numbers are those `python -m nca_interp.evaluate --control` gives
for a checkpoint saved at that step (tested inside `trainer.train()`). They are measured in the
model's own precision: a trainer in mixed precision (TRL's CPU default, bf16) has accelerate wrap
the model's forward in autocast, and the monitor runs the unwrapped forward instead, as
`evaluate` runs the saved weights.

With `lens_every=N` the callback also logs, every N steps, the two-view lens's headline
(`nca_interp.lens.monitor`) under `context_return/lens_`: the mean per-token KL(q_x || q_c) on
the student's own samples with c (`lens_kl`), with the wrong c' (`lens_kl_control`) and its
arithmetic floor (`lens_kl_floor`), each also per third of the response (`_first`, `_middle`,
`_last`), and the share of tokens whose top token c flips (`lens_flip`, `lens_flip_control`), on
`lens_items` held-out items: the numbers `python -m nca_interp.lens CKPT --n-levels lens_items`
gives for a checkpoint saved at that step.

Training anchors that never look at the context's return (TRL's distillation trainers, GKD,
SFT, GRPO with a privileged-context column) get the warning the paper is about while it
happens: a student whose accuracy with c falls below its accuracy without c is breaking.

What the wrong context c' is (the task's draw, or your own `control` field or `control_file=`
with its sha256, and the first items' c': `evaluate.control_record`) is logged once through
`logging` at the first measurement and kept as the callback's `c_prime`; every measurement in
`history` keeps the answers given with c' (`response_control`).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import torch
from transformers import TrainerCallback

from nca_interp.errors import UsageError
from nca_interp.evaluate import (
    control_record,
    control_report,
    format_c_prime,
    paired_report,
    play_levels,
    unscored_report,
    views_kl,
)
from nca_interp.lens import monitor

__all__ = ["ContextReturnCallback", "measure"]

KEYS = ("correct_no_c", "correct_c", "harm", "help", "both", "rel_len", "delta_c")
log = logging.getLogger(__name__)


def measure(model, tokenizer, task, context: str | None = None, n_items: int = 64,
            seed: int = 0, control: bool = True) -> dict:
    """The context return of `model` on the first `n_items` held-out items (greedy): a flat
    dict of numbers (None where undefined), the regime a letter; with `control` also what c'
    was (`c_prime`, `evaluate.control_record`) and the answers given with it
    (`response_control`)."""
    was_training = model.training
    model.eval()
    try:
        with own_precision(model):
            return _measure_views(model, tokenizer, task, context, n_items, seed, control)
    finally:
        model.train(was_training)


@contextmanager
def own_precision(model):
    """The block runs `model` in its weights' precision: accelerate's mixed precision replaces
    `model.forward` with one wrapped in autocast (the original kept as `_original_forward`);
    the original is put back for the block, and any autocast around it is switched off."""
    wrapped = model.__dict__.get("forward")
    original = model.__dict__.get("_original_forward")
    device = next(model.parameters()).device.type
    if wrapped is not None and original is not None:
        model.forward = original
    try:
        with torch.autocast(device_type=device, enabled=False):
            yield
    finally:
        if wrapped is not None and original is not None:
            model.forward = wrapped


def _measure_views(model, tokenizer, task, context, n_items, seed, control) -> dict:
    """`measure` on a model already in eval mode and in its own precision."""
    task = task.for_tokenizer(tokenizer)
    context = context or task.default_context
    levels = task.levels("test", n_items, seed)
    units = [task.unit(lv) for lv in levels]
    # c' before any generation: a c' the task refuses (c itself) stops here, not after
    wrong = [task.control_context(levels, i, context) for i in range(len(levels))] \
        if control and getattr(task, "scored", True) else None
    no_c = play_levels(model, tokenizer, task, levels, None, 0.0, seed)
    with_c = play_levels(model, tokenizer, task, levels, context, 0.0, seed)
    out = views_kl(model, tokenizer, task, levels, context, no_c["ids"], units)
    out = {"kl_views": out["kl_views"]}
    if not getattr(task, "scored", True):
        rep = unscored_report(no_c, with_c, units, task.unit_name)
        return {**out, "rel_len": rep["rel_len"], "len_no_c": rep["len_no_c"],
                "len_c": rep["len_c"]}
    rep = paired_report(no_c, with_c, units, task.unit_name)
    out.update({k: rep[k] for k in KEYS})
    out["harm_baseline"] = None if rep["correct_c"] is None else 1 - rep["correct_c"]
    out["regime"] = rep["regime"]
    if wrong is not None:
        ctrl = play_levels(model, tokenizer, task, levels, wrong, 0.0, seed)
        out["reads_c"] = control_report(no_c, with_c, ctrl, units, task.unit_name)["reads_c"]
        out["c_prime"] = control_record(task, levels, context, wrong)
        out["response_control"] = list(ctrl["texts"])
    return out


class ContextReturnCallback(TrainerCallback):
    """Measure the context return every `every` steps (and at the end of training) and log it
    (see the module docstring); with `lens_every` > 0, the lens's headline every `lens_every`
    steps (and at the end) on `lens_items` items. `trainer`: where to log (its `log`, so every
    logger sees it); without it the numbers go to `state.log_history` and `history`. `history`
    keeps every measurement with its step."""

    def __init__(self, task, context: str | None = None, every: int = 50, n_items: int = 64,
                 control: bool = True, seed: int = 0, trainer=None, tokenizer=None,
                 prefix: str = "context_return/", lens_every: int = 0, lens_items: int = 8):
        if every < 1 or n_items < 1 or lens_every < 0 or lens_items < 1:
            raise UsageError(f"every, n_items and lens_items must be >= 1 and lens_every >= 0 "
                             f"(0: no lens), not {every}, {n_items}, {lens_items} and "
                             f"{lens_every}")
        self.task, self.context, self.every, self.n_items = task, context, every, n_items
        self.control, self.seed, self.trainer, self.tokenizer = control, seed, trainer, tokenizer
        self.prefix, self.lens_every, self.lens_items = prefix, lens_every, lens_items
        self.history: list[dict] = []
        self.c_prime: dict | None = None  # what c' was (evaluate.control_record), once known
        if control and getattr(task, "scored", True):  # a c' the task refuses: before training
            ctx = context or task.default_context
            levels = task.levels("test", n_items, seed)
            for i in range(len(levels)):
                task.control_context(levels, i, ctx)
        self._last = self._last_lens = None

    def _tokenizer(self, kwargs):
        tok = self.tokenizer or kwargs.get("processing_class") or kwargs.get("tokenizer")
        if tok is None and self.trainer is not None:
            tok = getattr(self.trainer, "processing_class", None)
        if tok is None:
            raise UsageError("ContextReturnCallback needs the tokenizer: pass tokenizer= (the "
                             "trainer did not hand one to its callbacks)")
        return tok

    def _measure(self, state, model, kwargs) -> None:
        if model is None or self._last == state.global_step:
            return
        self._last = state.global_step
        numbers = measure(model, self._tokenizer(kwargs), self.task, self.context,
                          self.n_items, self.seed, self.control)
        c_prime = numbers.pop("c_prime", None)  # the same items each time: said once
        if c_prime is not None and self.c_prime is None:
            self.c_prime = c_prime
            log.info("%s%s", self.prefix, format_c_prime(c_prime))
        self.history.append({"step": state.global_step, **numbers})
        logs = {self.prefix + k: v for k, v in numbers.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
        logs[self.prefix + "regime_A"] = float(numbers.get("regime") == "A")
        self._log(state, logs)

    def _log(self, state, logs: dict) -> None:
        if self.trainer is not None:
            self.trainer.log(logs)
        else:
            state.log_history.append({**logs, "step": state.global_step})

    def _lens(self, state, model, kwargs) -> None:
        if model is None or not self.lens_every or self._last_lens == state.global_step:
            return
        self._last_lens = state.global_step
        with own_precision(model):
            numbers = monitor(model, self._tokenizer(kwargs), self.task, self.context,
                              self.lens_items, self.seed)
        numbers = {f"lens_{k}": v for k, v in numbers.items()}
        self.history.append({"step": state.global_step, **numbers})
        self._log(state, {self.prefix + k: v for k, v in numbers.items() if v is not None})

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._measure(state, model, kwargs)
        if self.lens_every and state.global_step % self.lens_every == 0:
            self._lens(state, model, kwargs)
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._measure(state, model, kwargs)
        self._lens(state, model, kwargs)
        return control
