"""grad_align: noise floors, cross-fitted angles, and the streamed reduction."""

import math

import numpy as np
import pytest
import torch

from nca_interp import grad_align
from nca_interp.reduce import Gram
from nca_interp.tasks import make_task
from tests.conftest import tiny

NAME = "model.layers.0.self_attn.q_proj.weight"


def gradients_in_memory(student, teacher, batch, terms=("opd", "nca", "ctx")):
    """{term: {param: grad}} on one batch, held in memory: the plain reference the streamed
    reduction is checked against."""
    from nca_interp.losses import loss_terms

    grads = {}
    for term in terms:
        student.zero_grad(set_to_none=True)
        loss_terms(student, teacher, batch, (term,))[term].backward()
        grads[term] = {n: (p.grad.detach().clone() if p.grad is not None
                           else torch.zeros_like(p)) for n, p in student.named_parameters()}
    student.zero_grad(set_to_none=True)
    return grads


def gram_of(vectors: dict[str, torch.Tensor]) -> Gram:
    g = Gram(list(vectors))
    g.add(NAME, [list(vectors.values())])
    return g


def two_halves(mu: torch.Tensor, noise: float, gen) -> list[torch.Tensor]:
    return [mu + noise * torch.randn(mu.shape, generator=gen, dtype=torch.float64)
            for _ in range(2)]


def test_cross_fitted_angle_is_unbiased_where_the_full_batch_angle_is_not():
    """Two terms whose expected gradients are 53.1 degrees apart (cos 0.6), each measured with
    noise as large as the signal per half: the full-batch angle drifts towards 90 degrees, the
    cross-fitted one stays at the truth; the floor is the halves' own angle."""
    gen = torch.Generator().manual_seed(0)
    n = 400_000
    e1 = torch.randn(n, generator=gen, dtype=torch.float64)
    e2 = torch.randn(n, generator=gen, dtype=torch.float64)
    e2 -= (e2 @ e1) / (e1 @ e1) * e1
    e1, e2 = e1 / e1.norm(), e2 / e2.norm()
    mu_a, mu_b = e1, 0.6 * e1 + 0.8 * e2
    sigma = 1 / math.sqrt(n)  # per-element noise: noise norm = signal norm per half
    na = two_halves(torch.zeros(n, dtype=torch.float64), sigma, gen)
    nb = two_halves(torch.zeros(n, dtype=torch.float64), sigma, gen)
    # the two terms are measured on the same samples: their noise is correlated within a half
    a1, a2 = (mu_a + x for x in na)
    b1, b2 = (mu_b + 0.8 * x + 0.6 * y for x, y in zip(na, nb))
    gram = gram_of({"a:1": a1, "a:2": a2, "b:1": b1, "b:2": b2})
    r = grad_align.alignment_of(gram, "global", ["a", "b"], {1: 1.0, 2: 1.0})
    truth = math.degrees(math.acos(0.6))
    assert r["angle_xfit_deg"]["a~b"] == pytest.approx(truth, abs=1.5)
    # full batch: cos = (0.6 + 0.8 / 2) / (1 + 1 / 2) = 0.667, i.e. 48 degrees: pulled
    # towards the noise's own correlation
    assert r["angle_deg"]["a~b"] == pytest.approx(math.degrees(math.acos(2 / 3)), abs=1.5)
    # floor: cos(g1, g2) = |mu|^2 / (|mu|^2 + noise^2) = 1/2; snr of the mean: sqrt(2)
    assert r["self_angle_deg"]["a"] == pytest.approx(60, abs=1.5)
    assert r["snr"]["a"] == pytest.approx(math.sqrt(2), rel=0.05)


def test_identical_and_opposite_terms_and_noise_only_terms():
    gen = torch.Generator().manual_seed(1)
    mu = torch.randn(1000, generator=gen, dtype=torch.float64)
    g1, g2 = two_halves(mu, 0.01, gen)
    noise1, noise2 = two_halves(torch.zeros(1000, dtype=torch.float64), 1.0, gen)
    gram = gram_of({"a:1": g1, "a:2": g2, "b:1": g1.clone(), "b:2": g2.clone(),
                    "c:1": -g1, "c:2": -g2, "z:1": noise1, "z:2": noise2})
    r = grad_align.alignment_of(gram, "global", ["a", "b", "c", "z"], {1: 1.0, 2: 1.0})
    assert r["angle_deg"]["a~b"] == pytest.approx(0, abs=1e-3)
    assert r["angle_deg"]["a~c"] == pytest.approx(180, abs=1e-3)
    assert r["angle_xfit_deg"]["a~c"] == pytest.approx(180, abs=1.0)
    # a term with no signal (pure sampling noise) gets no angle, whatever its norm
    assert r["snr"]["z"] < 1 and r["angle_deg"]["a~z"] is None
    assert r["angle_xfit_deg"]["a~z"] is None and r["snr"]["a"] > 10


@pytest.fixture(scope="module")
def setup(tok):
    task = make_task("sokoban")
    student, teacher = tiny(tok, seed=0), tiny(tok, seed=1)
    teacher.requires_grad_(False)
    levels = task.levels("grad", 8)
    return task, student, teacher, levels


def test_streamed_reduction_equals_in_memory(setup, tok):
    task, student, teacher, levels = setup
    halves = grad_align.sample_halves(student, tok, task, levels, "state", 1.0, 0, 4, 512)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        grad_align.spill_term_gradients(student, teacher, halves, ("opd", "nca", "ctx"),
                                        Path(tmp))
        labels = [f"{t}:{h}" for t in ("opd", "nca", "ctx") for h in (1, 2)]
        streamed = grad_align.stream_gram(Path(tmp), labels)
    flat = {}
    for h, pieces in zip((1, 2), halves):
        (piece,) = pieces  # micro-batch = half: the half's mean is one batch mean
        grads = gradients_in_memory(student, teacher, piece)
        for t, g in grads.items():
            flat[f"{t}:{h}"] = torch.cat([v.flatten().double() for v in g.values()])
    ref = np.array([[float(flat[a] @ flat[b]) for b in labels] for a in labels])
    assert np.allclose(streamed.mats["global"], ref, rtol=1e-10, atol=0)


def test_micro_batches_give_the_same_gradients(setup, tok):
    """The same sampled halves, backward in one piece per half or one prompt at a time."""
    task, student, teacher, levels = setup
    import tempfile
    from pathlib import Path

    whole = grad_align.sample_halves(student, tok, task, levels, "state", 1.0, 0, 4, 512)
    split = [[b.rows(i, i + 1) for i in range(4)] for (b,) in whole]
    grams = []
    for halves in (whole, split):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = grad_align.spill_term_gradients(student, teacher, halves, ("opd", "nca"),
                                                     Path(tmp))
            grams.append(grad_align.stream_gram(Path(tmp), ["opd:1", "opd:2", "nca:1",
                                                            "nca:2"]))
    assert tokens[1] > 0
    assert np.allclose(grams[0].mats["global"], grams[1].mats["global"], rtol=1e-4)


def test_term_by_term_past_the_memory_bound_gives_the_same_gradients(setup, tok, monkeypatch):
    """Several micro-batches a part: the shared forward (every term's sum held at once) and,
    past SHARED_GRAD_BYTES, the term-by-term loop spill the same gradients; a frozen
    parameter's gradient is zero either way."""
    task, student, teacher, levels = setup
    import tempfile
    from pathlib import Path

    whole = grad_align.sample_halves(student, tok, task, levels, "state", 1.0, 0, 4, 512)
    split = [[b.rows(i, i + 2) for i in (0, 2)] for (b,) in whole]
    labels = [f"{t}:{h}" for t in ("opd", "nca", "ctx") for h in (1, 2)]
    frozen = student.get_parameter(NAME)
    grams = []
    try:
        frozen.requires_grad_(False)
        for bound in (grad_align.SHARED_GRAD_BYTES, 0):
            monkeypatch.setattr(grad_align, "SHARED_GRAD_BYTES", bound)
            with tempfile.TemporaryDirectory() as tmp:
                grad_align.spill_term_gradients(student, teacher, split, ("opd", "nca", "ctx"),
                                                Path(tmp))
                grams.append(grad_align.stream_gram(Path(tmp), labels))
    finally:
        frozen.requires_grad_(True)
    assert np.allclose(grams[0].mats["global"], grams[1].mats["global"], rtol=1e-6)
    for g in grams:
        assert not g.mats["0.q_proj"].any()  # layer 0 has one q_proj: the frozen one
    flat = {}
    for h, (piece,) in zip((1, 2), whole):
        for t, g in gradients_in_memory(student, teacher, piece).items():
            flat[f"{t}:{h}"] = torch.cat([v.flatten().double() for n, v in g.items()
                                          if n != NAME])
    ref = np.array([[float(flat[a] @ flat[b]) for b in labels] for a in labels])
    assert np.allclose(grams[0].mats["global"], ref, rtol=1e-4)


def test_gradients_held_at_once_stay_within_the_stated_bound(setup, tok, monkeypatch):
    """Gradient tensors alive at each backward, in model sizes: one for a part of one
    micro-batch (each term written as soon as taken); the terms' running sums and one more for
    several; a running sum and one more past SHARED_GRAD_BYTES."""
    import gc
    import tempfile
    import weakref
    from pathlib import Path

    task, student, teacher, levels = setup
    size = sum(p.numel() * p.element_size() for p in student.parameters())
    real, live, peak = torch.autograd.grad, [], [0]

    def counting(*a, **k):
        out = real(*a, **k)
        live.extend(weakref.ref(g) for g in out if g is not None)
        gc.collect()
        alive = [r() for r in live if r() is not None]
        peak[0] = max(peak[0], sum(g.numel() * g.element_size() for g in alive))
        return out

    monkeypatch.setattr(torch.autograd, "grad", counting)
    terms = ("opd", "nca", "ctx")
    for micro, bound, most in ((4, 1 << 40, 1), (2, 1 << 40, len(terms) + 1), (2, 0, 2)):
        parts = grad_align.sample_halves(student, tok, task, levels, "state", 1.0, 0, micro, 512)
        monkeypatch.setattr(grad_align, "SHARED_GRAD_BYTES", bound)
        live.clear()
        peak[0] = 0
        with tempfile.TemporaryDirectory() as tmp:
            grad_align.spill_term_gradients(student, teacher, parts, terms, Path(tmp))
        assert peak[0] / size == pytest.approx(most), (micro, bound)


def test_batch_must_split_in_two(tmp_path):
    with pytest.raises(ValueError, match="even number"):
        grad_align.main(["--batch", "3", "--out", str(tmp_path / "x")])


def test_part_statistics_recover_the_truth_and_pass_the_positive_control():
    """Eight independent parts per term, expected gradients 53.1 degrees apart, each part's
    noise twice its signal: the corrected cosine finds 0.6 inside its jackknife interval, each
    term against itself on disjoint halves finds ~1 (the positive control) where the raw
    half-half angle (the floor) is large, and the floor the noise scale predicts matches the
    measured one. A pure-noise term gets no corrected cosine."""
    gen = torch.Generator().manual_seed(3)
    n, P = 200_000, 8
    e1 = torch.randn(n, generator=gen, dtype=torch.float64)
    e2 = torch.randn(n, generator=gen, dtype=torch.float64)
    e2 -= (e2 @ e1) / (e1 @ e1) * e1
    e1, e2 = e1 / e1.norm(), e2 / e2.norm()
    mus = {"a": e1, "b": 0.6 * e1 + 0.8 * e2, "z": torch.zeros(n, dtype=torch.float64)}
    sigma = 2 / math.sqrt(n)
    vecs = {f"{t}:{p}": mu + sigma * torch.randn(n, generator=gen, dtype=torch.float64)
            for t, mu in mus.items() for p in range(1, P + 1)}
    gram = gram_of(vecs)
    r = grad_align.alignment_of(gram, "global", ["a", "b", "z"], {p: 1.0 for p in
                                                                  range(1, P + 1)}, detail=True)
    st = r["parts"]
    ab = st["pairs"]["a~b"]
    assert ab["ci95"][0] <= 0.6 <= ab["ci95"][1] and abs(ab["cos_corrected"] - 0.6) < 0.1
    assert st["pairs"]["a~z"]["cos_corrected"] is None or st["terms"]["z"]["noise_scale"] is None
    a = st["terms"]["a"]
    assert a["positive_control"]["mean"] == pytest.approx(1.0, abs=0.1)
    assert a["floor_splits_deg"] > 40  # the raw halves are far apart: noise dominates
    assert a["floor_predicted_deg"] == pytest.approx(a["floor_splits_deg"], abs=5)
    # each part's noise variance is 4 x the signal: noise_scale ~ 4
    assert a["noise_scale"] == pytest.approx(4.0, rel=0.25)
    # two of these parts alone: each term is within its noise (snr < 1), so the two-half
    # estimator gives no angle at all, where eight parts recover it
    two = {k: v for k, v in vecs.items() if k.endswith((":1", ":2"))}
    r2 = grad_align.alignment_of(gram_of(two), "global", ["a", "b", "z"], {1: 1.0, 2: 1.0},
                                 detail=True)
    assert "parts" not in r2 and r2["angle_xfit_deg"]["a~b"] is None and r2["snr"]["a"] < 1


def test_angles_over_training_draw_what_the_claims_judge():
    """With --parts the figure over training draws the noise-corrected angle with its jackknife
    interval (the verdicts' statistic), not the raw cross-fitted one; without, the raw one,
    said in the title."""
    from nca_interp import plots

    def cell(raw, corrected, lo, hi):
        return {"modules": {}, "tokens": {},
                "global": {"angle_xfit_deg": {"opd~ctx": raw}, "self_angle_deg": {"opd": 20.0},
                           "parts": {"pairs": {"opd~ctx": {"angle_corrected_deg": corrected,
                                                           "angle_ci95_deg": [lo, hi]}}}}}

    report = {"task": "t", "context": "plan", "config": {}, "runs": {}, "batch": 8,
              "steps": [50, 100],
              "results": {"a": cell(60.0, 80.0, 70.0, 95.0), "b": cell(50.0, 88.0, 85.0, 89.0)}}
    fig = plots.grad_align_over_steps(report)
    line = next(t for t in fig.data if t.name == "opd~ctx")
    assert list(line.y) == [80.0, 88.0]
    assert list(line.error_y.array) == [15.0, 1.0] and list(line.error_y.arrayminus) == [10.0, 3.0]
    assert "noise-corrected" in fig.layout.title.text
    for c in report["results"].values():
        del c["global"]["parts"]
    fig = plots.grad_align_over_steps(report)
    assert list(next(t for t in fig.data if t.name == "opd~ctx").y) == [60.0, 50.0]
    assert "uncorrected" in fig.layout.title.text


def test_checkpoints_of_different_runs_are_categories_not_a_course_over_training():
    """grad_align on an OPD and an NCA checkpoint (the notebook's call): no 'distillation
    step' axis with made-up ticks, no lines joining the two runs' floors, no over-training
    figure; one run's saved steps keep their course."""
    from nca_interp import grad_align

    def cell():
        return {"modules": {}, "tokens": {}, "global": {"angle_xfit_deg": {"opd~ctx": 80.0},
                                                       "self_angle_deg": {"opd": 20.0,
                                                                          "ctx": 30.0}}}

    two_runs = {"task": "sokoban", "context": "plan", "runs": {}, "batch": 8,
                "config": {"ckpt": ["/m/opd", "/m/nca"]},
                "results": {"/m/opd": cell(), "/m/nca": cell()}}
    figs = grad_align.figures(two_runs)
    assert set(figs) == {""}
    fig = figs[""]
    assert fig.layout.xaxis.title.text == "checkpoint"
    assert {tuple(t.x) for t in fig.data} == {("opd", "nca")}
    assert all("lines" not in t.mode for t in fig.data)
    assert "2 checkpoints" in fig.layout.title.text
    one_run = {"task": "sokoban", "context": "plan", "runs": {}, "batch": 8, "steps": [50, 100],
               "config": {"ckpt": ["runs/x/checkpoints/step_50", "runs/x/checkpoints/step_100"]},
               "results": {"step_50": cell(), "step_100": cell()}}
    figs = grad_align.figures(one_run)
    assert set(figs) == {"", "steps"}
    assert figs[""].layout.xaxis.title.text == "distillation step"
    assert list(figs[""].data[0].x) == [50, 100] and "lines" in figs[""].data[0].mode
    assert figs[""].layout.title.text.startswith("sokoban x: angles")


def test_a_gradient_within_numerical_noise_of_zero_gets_no_angle():
    """A term a few float32 ulps of the largest one's scale (below ZERO_REL) has no direction
    left to measure, however high its snr (rounding repeats between halves): undefined, never
    an angle; the other pairs keep theirs."""
    gen = torch.Generator().manual_seed(2)
    mu = torch.randn(1000, generator=gen, dtype=torch.float64)
    tiny_dir = 1e-8 * torch.randn(1000, generator=gen, dtype=torch.float64)
    gram = gram_of({"opd:1": mu + 0.01 * torch.randn(1000, generator=gen, dtype=torch.float64),
                    "opd:2": mu + 0.01 * torch.randn(1000, generator=gen, dtype=torch.float64),
                    "ctx:1": tiny_dir, "ctx:2": tiny_dir.clone(),  # repeats: a high snr
                    "nca:1": -mu, "nca:2": -mu})
    r = grad_align.alignment_of(gram, "global", ["opd", "ctx", "nca"], {1: 1.0, 2: 1.0})
    assert "ctx" in r["undefined"] and "numerical noise" in r["undefined"]["ctx"]
    assert r["angle_deg"]["opd~ctx"] is None and r["angle_xfit_deg"]["opd~ctx"] is None
    assert r["angle_deg"]["opd~nca"] == pytest.approx(180, abs=1.0)  # the others still are


def test_at_self_distillations_step_zero_the_context_view_has_no_direction(setup, tok):
    """Student and teacher one model: KL(g(.|x,c) || f(.|x,c)) is 0 at every sample, so ctx is
    undefined whatever rounding leaves of its gradient; with another teacher it is measured."""
    task, student, teacher, levels = setup
    halves = grad_align.sample_halves(student, tok, task, levels, "state", 1.0, 0, 4, 512)
    same = grad_align.checkpoint_alignment(student, student, halves)
    assert "ctx" in same["global"]["undefined"]
    assert same["global"]["angle_deg"]["opd~ctx"] is None
    other = grad_align.checkpoint_alignment(student, teacher, halves)
    assert "ctx" not in other["global"]["undefined"]
