"""Attribution patching (nca_interp.patching.attribution): the first-order term of the exact
patching effect, between the two views as the package aligns them."""

import numpy as np
import pytest
import torch

from nca_interp import patching
from nca_interp.checkpoint import save_checkpoint
from nca_interp.hooks import attached_hooks, boot_bridge
from nca_interp.names import head_z_hook, mlp_out_hook, pattern_hook, resid_hook
from nca_interp.patching.attribution import (
    agreement,
    attribute,
    choose,
    confirmed_sweep,
    head_candidates,
    spearman,
)
from nca_interp.patching.interventions import ablate_context_hook, cache_of, sweep
from nca_interp.patching.rerun import Rerun
from nca_interp.tasks import make_task
from tests.conftest import tiny

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}
PLANTED = (0, 2)  # the one head whose output reaches the residual stream in `planted`


def cases_of(tok, task):
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    levels = task.levels("test", 3)
    # responses that part at different points (t* = 0, 1, 2): prefixes of several lengths
    rows = [(levels[0], ids("UR") + [tok.eos_token_id], ids("DR"), 0),
            (levels[1], ids("LUR") + [tok.eos_token_id], ids("LD"), 1),
            (levels[2], ids("RRD") + [tok.eos_token_id], ids("RRU"), 2)]
    return patching.build_cases(tok, task, "state", rows, None)


@pytest.fixture(scope="module")
def setup(tok, tmp_path_factory):
    folder = save_checkpoint(tmp_path_factory.mktemp("a") / "m", tiny(tok, seed=3), tok,
                             {"task": TASK})
    task = make_task("sokoban")
    return boot_bridge(folder), cases_of(tok, task)


@pytest.fixture(scope="module")
def planted(tok, tmp_path_factory):
    """A tiny model whose every head writes nothing (o_proj zero) except PLANTED: the only
    path from c to the deciding position is that head's reading of it."""
    model = tiny(tok, seed=5)
    L0, h0 = PLANTED
    with torch.no_grad():
        for li, layer in enumerate(model.model.layers):
            w = layer.self_attn.o_proj.weight  # d_model, heads * d_head
            d_head = w.shape[1] // model.config.num_attention_heads
            keep = torch.zeros(w.shape[1], dtype=torch.bool)
            if li == L0:
                keep[h0 * d_head: (h0 + 1) * d_head] = True
            w.mul_(keep.float() * 3.0)
        model.lm_head.weight.mul_(100)  # LDs of order 1, so the views differ in every case
    folder = save_checkpoint(tmp_path_factory.mktemp("planted") / "m", model, tok,
                             {"task": TASK})
    return boot_bridge(folder), cases_of(tok, make_task("sokoban"))


def mixing_hook(source, where_B_W, eps, head=None):
    """Write a fraction `eps` of the way from the running view to `source` (the other view's
    activations, width W) into its last W columns where `where_B_W` is set."""
    W = source.shape[1]

    def hook(act, hook):
        tail = act[:, -W:] if head is None else act[:, -W:, head]
        src = source if head is None else source[:, :, head]
        m = where_B_W.reshape(*where_B_W.shape, *([1] * (src.dim() - 2)))
        tail.copy_(torch.where(m, tail + eps * (src - tail), tail))
        return act

    return hook


def node(name, source, where_B_W, head=None):
    """The hooks that patch a fraction e of `name`'s way to `source`, as a function of e."""
    return lambda e: [(name, mixing_hook(source, where_B_W, e, head))]


def slope(run: Rerun, cases, start, end, hook_of, eps=1e-2) -> np.ndarray:
    """Per case, d(normalised effect)/d(fraction patched) at 0, by a central difference."""
    up = patching.logit_diff(run.logits(hook_of(eps)), cases)
    down = patching.logit_diff(run.logits(hook_of(-eps)), cases)
    return ((up - down) / (2 * eps) / (end - start)).numpy()


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_attribution_is_the_first_order_term_of_exact_patching(setup, direction):
    """Patching a fraction eps of the way to the other view changes the normalised LD by
    eps x attribution to first order, for every node kind: the residual stream by position
    group and at single positions, MLP outputs, head outputs and (forward: the context run)
    each head's reading of c, whose pattern edit is exact and linear after the softmax.
    The exact side uses the package's own alignment (`patch_hook`'s last W columns, the
    views' shared suffix), so breaks were tried in `attribution.py` and each failed here:
    the gradient's sign flipped (`-g.detach()` in `gradients`: both directions); the source
    view's columns shifted by one against the target's (`other[name][:, -A:].roll(1, 1)` in
    `attribute`: both directions); the source's first A columns taken instead of its last
    (`other[name][:, :A]`: the reverse direction, where the source [c, x] is the wider)."""
    bridge, cases = setup
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    attr = attribute(bridge, cases, direction, {}, "full")
    fwd = direction == "forward"
    src, dst = (cases.src_ids, cases.src_mask), (cases.dst_ids, cases.dst_mask)
    run = Rerun(bridge, *(dst if fwd else src))
    names = [resid_hook(li) for li in range(L)] + [mlp_out_hook(li) for li in range(L)] + \
        [head_z_hook(li) for li in range(L)]
    other = cache_of(bridge, *(src if fwd else dst), names)
    ld_src, ld_dst = patching.interventions.view_lds(bridge, cases)
    start, end = (ld_dst, ld_src) if fwd else (ld_src, ld_dst)
    W0 = cases.src_ids.shape[1]
    A = min(W0, cases.dst_ids.shape[1])  # the aligned columns: the last A of both runs
    other = {n: v[:, -A:] for n, v in other.items()}
    assert (ld_src - ld_dst).abs().min() > 0.02  # every case's views differ: no NaN below
    checked = 0
    for li in range(L):
        for name, where, head, got in (
                [(resid_hook(li), cases.groups[g], None, attr["resid_groups"][g][:, li])
                 for g in patching.GROUPS]
                + [(mlp_out_hook(li), cases.groups["all"], None, attr["mlp"][:, li])]
                + [(head_z_hook(li), cases.groups["all"], h, attr["heads"][:, li, h])
                   for h in range(H)]):
            want = slope(run, cases, start, end, node(name, other[name], where, head))
            np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-3, err_msg=name)
            checked += 1
        for k in (1, 3):  # single positions: the deciding one and two before it
            where = torch.zeros_like(cases.groups["all"])
            where[:, W0 - k] = cases.groups["all"][:, W0 - k]
            want = slope(run, cases, start, end,
                         node(resid_hook(li), other[resid_hook(li)], where))
            np.testing.assert_allclose(attr["resid_offsets"][:, li, k - 1], want, rtol=2e-2,
                                       atol=2e-3)
    assert checked == L * (len(patching.GROUPS) + 1 + H)
    if fwd:  # each head's reading of c: the pattern moved eps of the way to its ablation
        for li in range(L):
            for h in range(H):
                def toward(e, li=li, h=h):
                    def hook(p, hook):
                        ablated = ablate_context_hook(cases.ctx_B_W1, [h])(p.clone(), None)
                        p[:, h] += e * (ablated[:, h] - p[:, h])
                        return p
                    return [(pattern_hook(li), hook)]
                # the ablation moves LD from the context view's towards the no-context one's
                want = slope(run, cases, ld_dst, ld_src, toward)
                np.testing.assert_allclose(attr["ablation"][:, li, h], want, rtol=2e-2,
                                           atol=2e-3, err_msg=f"L{li}H{h}")
    else:
        assert "ablation" not in attr
    assert attached_hooks(bridge) == 0


def test_a_planted_head_ranks_first_by_attribution_and_by_exact_patching(planted):
    """Every head's output zeroed but PLANTED's: c reaches the answer through that head
    alone. Attribution and exact patching both put it first, for its output patched either
    way and for its reading of c removed, and the other heads' exact effects are exactly 0;
    attribution's candidates (top 1, no random check) are that head, and its first-order
    term lies near its exact effect in every case. Tried: the gradient's sign flipped in
    `attribution.gradients` ranks it last by attribution and fails here; so does either view
    misaligned (the longer view's activations read from its first columns instead of its
    last, in `attribute` or in the exact sweep's `effect`)."""
    bridge, cases = planted
    H = bridge.cfg.n_heads
    first = PLANTED[0] * H + PLANTED[1]
    stats = {"forwards": 0}
    exact_abl = patching.ablation(bridge, cases)
    for direction in ("forward", "reverse"):
        attr = attribute(bridge, cases, direction, stats, "full")
        exact = sweep(bridge, cases, direction, stats, "full")
        for what, a, e in [("heads", attr["heads"], exact["heads"])] + (
                [("ablation", attr["ablation"], exact_abl)] if direction == "forward" else []):
            a_mean, e_mean = a.mean(0).ravel(), e.mean(0).ravel()
            assert np.argmax(a_mean) == first, (direction, what, a_mean)
            assert np.argmax(e_mean) == first, (direction, what, e_mean)
            assert np.allclose(np.delete(e_mean, first), 0, atol=1e-5)
            assert e_mean[first] == pytest.approx(1.0, abs=1e-4)  # the whole effect
            # the first-order term near the exact effect in every case (0.75-1.23 here): a
            # source read from the wrong columns of the longer view scatters it (-0.3 to 60)
            np.testing.assert_allclose(a[:, PLANTED[0], PLANTED[1]], 1.0, atol=0.35,
                                       err_msg=f"{direction} {what}")
        picked = confirmed_sweep(bridge, cases, direction, {"forwards": 0}, "full", attr, 1, 0,
                                 np.random.default_rng(0))
        assert picked["candidates"]["heads"] == {"top": [first], "check": []}
        heads = picked["heads"].reshape(len(cases), -1)
        assert np.isfinite(heads[:, first]).all()
        assert np.isnan(np.delete(heads, first, 1)).all()  # nothing else patched
    assert attached_hooks(bridge) == 0


def test_candidates_are_chosen_per_half_and_the_check_is_random():
    """Each half's candidates are its own top k (so the held-out table never chooses on A a
    head put forward by B's cases); the random check avoids both."""
    N, L, H = 6, 2, 4
    attr = np.zeros((N, L, H))
    A, B = [0, 1, 2], [3, 4, 5]
    attr[A, 0, 1], attr[B, 1, 3] = 1.0, 1.0
    picked = head_candidates(attr, (A, B), 1, 3, np.random.default_rng(0))
    assert picked["top_a"] == [1] and picked["top_b"] == [7]
    assert len(picked["check"]) == 3 and not {1, 7} & set(picked["check"])
    assert (0, 1) in picked["A"] and (1, 3) not in picked["A"]
    assert (1, 3) in picked["B"] and (0, 1) not in picked["B"]
    top, check = choose(attr, 2, 10, np.random.default_rng(0))
    assert sorted(top) == [1, 7] and len(check) == L * H - 2


def test_agreement_counts_rank_order_overlap_and_misses():
    exact = np.array([[0.9, 0.5, 0.1, 0.0, 0.7]])
    assert spearman(exact[0], exact[0]) == pytest.approx(1.0)
    assert spearman(exact[0], -exact[0]) == pytest.approx(-1.0)
    attr = np.array([[0.8, 0.6, 0.2, 0.1, -0.5]])  # node 4 ranked last by attribution
    out = agreement(attr, exact, 2, checked=[4])
    assert out["top_k_overlap"] == 0.5 and out["misses"] == [4] and out["n_exact"] == 5
    partial = exact.copy()
    partial[0, 2] = np.nan  # not patched: left out
    assert agreement(attr, partial, 2)["n_exact"] == 4


def test_the_command_records_which_method_made_each_number(setup):
    """`--method attribution` (the default) patches exactly only candidates and a random
    check and records beside each family its method, attribution and agreement; `--method
    exact` patches every node, as before."""
    bridge, cases = setup
    stats = {"forwards": 0}
    for method in ("attribution", "exact"):
        cfg = patching.PatchingConfig(method=method, top_k=2, n_check=1, ks=[1])
        res, attr, picked = patching.sweeps(bridge, cases, cfg, stats, None, True)
        rec = patching.direction_record(res["forward"], attr.get("forward"), None, cfg)
        heads = np.array(rec["heads"]["per_case"])
        if method == "exact":
            assert np.isfinite(heads).all() and picked is None
            assert rec["methods"]["heads"] == {"method": patching.BY["exact"]}
            continue
        assert np.isfinite(heads).reshape(len(cases), -1).all(0).sum() == 3  # 2 + 1 check
        m = rec["methods"]["heads"]
        assert m["method"] == patching.BY["attribution"] and len(m["candidates"]["top"]) == 2
        assert set(m["agreement"]) >= {"spearman", "top_k_overlap", "misses"}
        assert "spearman" in rec["methods"]["mlp"]["agreement"]  # full families compared too
        assert np.isfinite(res["ablation"]).reshape(len(cases), -1).all(0).sum() == \
            len(picked["all"])
    assert attached_hooks(bridge) == 0
