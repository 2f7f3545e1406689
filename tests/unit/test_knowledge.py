"""nca_interp.paper.knowledge: the right value's teacher-forced log-probability and its movement."""

import math
from types import SimpleNamespace

import numpy as np
import torch

from nca_interp.paper import knowledge
from nca_interp.tasks import make_task
from tests.unit.test_facts import _ChatTok

V = 1000


class Uniform(torch.nn.Module):
    """Equal logits over V tokens at every position (a stand-in, not an HF model)."""

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, V))


def test_only_the_values_tokens_are_summed():
    tok = _ChatTok()
    task = make_task("facts").for_tokenizer(tok)
    levels = task.levels("test", 10_000, 0)[:12]
    values = [lv.value for lv in levels]
    lp = knowledge.value_logprobs(Uniform(), tok, task, levels, values, None, batch=5)
    words = np.array([len(v.split()) for v in values])  # the word tokenizer: a token a word
    assert np.allclose(lp, -words * math.log(V))  # not "The answer is", ".", nor the eos
    assert len(set(words)) > 1  # founders (two words) and capitals (one) both present


def test_slope_and_steps_to_the_teachers_margin():
    rng = np.random.default_rng(0)
    rows = []
    for step in (0, 4, 8):
        wrong = rng.normal(-10, 0.1, (6, 3))
        right = wrong.mean(1) + 0.5 * step  # margin 0.5 per step
        rows.append({"step": step, "no_c": {"right": right.tolist(), "wrong": wrong.tolist()},
                     "c": {"right": (wrong.mean(1) + 10).tolist(), "wrong": wrong.tolist()}})
    s = knowledge.summarise(rows, [f"u{i}" for i in range(6)], n_boot=200)
    assert abs(s["slope"] - 0.5) < 1e-9
    assert abs(s["steps_to_teacher"] - (10 - 4) / 0.5) < 1e-6
    assert s["rows"][0]["beats_all"] == 0.0  # the mean of the wrong values never beats them all
    assert s["rows"][-1]["beats_all"] == 1.0
    for r in rows:  # a margin that never rises never arrives
        r["no_c"]["right"] = np.asarray(rows[0]["no_c"]["right"]).tolist()
    assert knowledge.summarise(rows, [f"u{i}" for i in range(6)], n_boot=50)[
        "steps_to_teacher"] is None
