"""patching: properties any correct activation patching must have."""

import dataclasses

import numpy as np
import pytest
import torch

from nca_interp import patching, plots
from nca_interp.checkpoint import save_checkpoint
from nca_interp.hooks import attached_hooks, boot_bridge
from nca_interp.patching import command  # what patching.run calls: replaced there in tests
from nca_interp.patching.rerun import Rerun, first_layer
from nca_interp.tasks import make_task
from tests.conftest import tiny

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}


@pytest.fixture(scope="module")
def setup(tok, tmp_path_factory):
    folder = save_checkpoint(tmp_path_factory.mktemp("p") / "m", tiny(tok, seed=3), tok,
                             {"task": TASK})
    bridge = boot_bridge(folder)
    task = make_task("sokoban")
    levels = task.levels("test", 3)
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    # responses that part at different points (t* = 0, 1, 2): prefixes of several lengths
    rows = [(levels[0], ids("UR") + [tok.eos_token_id], ids("DR"), 0),
            (levels[1], ids("LUR") + [tok.eos_token_id], ids("LD"), 1),
            (levels[2], ids("RRD") + [tok.eos_token_id], ids("RRU"), 2)]
    cases = patching.build_cases(tok, task, "state", rows, None)
    return bridge, task, cases, folder


def full_logits(bridge, ids, mask, hooks=()):
    try:
        with torch.no_grad():
            return bridge.run_with_hooks(ids, attention_mask=mask, fwd_hooks=list(hooks))
    finally:
        bridge.reset_hooks()


def test_cases_line_up_x_and_the_response_prefix(setup):
    _, _, cases, _ = setup
    W0 = cases.src_ids.shape[1]
    tail = cases.dst_ids[:, -W0:]
    aligned = cases.groups["all"]
    assert torch.equal(tail[aligned], cases.src_ids[aligned])  # same tokens where aligned
    assert cases.groups["response"].sum(1).tolist() == [0, 1, 2]  # t* prefix tokens
    # every token of x is aligned (char tokenizer: one token per character)
    assert cases.groups["x"].sum(1).tolist() == [len(setup[1].prompt(lv)) for lv in cases.levels]
    assert not (cases.groups["x"] & cases.groups["response"]).any()
    assert cases.ctx_B_W1.any(1).all()  # every row has context columns


def test_patching_a_run_with_its_own_activations_changes_nothing(setup):
    bridge, _, cases, _ = setup
    L = bridge.cfg.n_layers
    names = [f"blocks.{i}.hook_resid_post" for i in range(L)] + \
        [f"blocks.{i}.attn.hook_z" for i in range(L)]
    own = patching.cache_of(bridge, cases.dst_ids, cases.dst_mask, names)
    clean = full_logits(bridge, cases.dst_ids, cases.dst_mask)
    every = torch.ones_like(cases.dst_mask, dtype=torch.bool)
    for name in names:
        head = 1 if "hook_z" in name else None
        out = full_logits(bridge, cases.dst_ids, cases.dst_mask,
                          [(name, patching.patch_hook(own[name], every, head))])
        assert torch.equal(out, clean), name
    assert attached_hooks(bridge) == 0


def test_patching_every_layer_from_the_source_reproduces_its_logits(setup):
    bridge, _, cases, _ = setup
    L = bridge.cfg.n_layers
    W0 = cases.src_ids.shape[1]
    names = [f"blocks.{i}.hook_resid_post" for i in range(L)]
    src = patching.cache_of(bridge, cases.src_ids, cases.src_mask, names)
    where = cases.groups["all"]
    hooks = [(n, patching.patch_hook(src[n], where)) for n in names]
    patched = full_logits(bridge, cases.dst_ids, cases.dst_mask, hooks)[:, -W0:]
    source = full_logits(bridge, cases.src_ids, cases.src_mask)
    resp = cases.groups["response"] | cases.groups["decide"]
    assert torch.allclose(patched[resp], source[resp], atol=1e-5)
    assert not torch.allclose(full_logits(bridge, cases.dst_ids, cases.dst_mask)[:, -W0:][resp],
                              source[resp], atol=1e-3)  # the views did differ


def scaled(act, hook):
    act.mul_(1.5)  # in place, as the patch hooks write
    return act


def test_a_rerun_from_the_hooked_layer_equals_the_full_forward(setup):
    """Every hook kind at every layer, on left-padded views of several lengths: the rerun of
    blocks l.. gives the full forward's last logits, and stays exact when asked again (an
    in-place hook on a block's input must not reach the kept clean run)."""
    bridge, _, cases, _ = setup
    L = bridge.cfg.n_layers
    for ids, mask in ((cases.src_ids, cases.src_mask), (cases.dst_ids, cases.dst_mask)):
        run = Rerun(bridge, ids, mask)
        assert run.exact  # the fast path is the one under test
        assert torch.equal(run.logits(), full_logits(bridge, ids, mask)[:, -1])
        for li in range(L):
            for name in (f"blocks.{li}.hook_resid_pre", f"blocks.{li}.hook_resid_post",
                         f"blocks.{li}.hook_mlp_out", f"blocks.{li}.attn.hook_z",
                         f"blocks.{li}.attn.hook_pattern"):
                want = full_logits(bridge, ids, mask, [(name, scaled)])[:, -1]
                assert not torch.allclose(want, run.logits(), atol=1e-4), name  # it did act
                for _ in range(2):
                    assert torch.allclose(run.logits([(name, scaled)]), want, atol=1e-5), name
        both = [("blocks.1.hook_mlp_out", scaled), ("blocks.0.attn.hook_z", scaled)]
        assert torch.allclose(run.logits(both), full_logits(bridge, ids, mask, both)[:, -1],
                              atol=1e-5)
        assert torch.equal(run.logits([("hook_embed", scaled)]),  # outside the blocks: full
                           full_logits(bridge, ids, mask, [("hook_embed", scaled)])[:, -1])
    assert attached_hooks(bridge) == 0


def right_scaled(first_from_right: int):
    """A hook that scales only the last `first_from_right` columns (counted from the right, as
    the patch hooks count), so every column left of them is unchanged."""
    def hook(act, hook):
        act[:, -first_from_right:] = act[:, -first_from_right:] * 1.5
        return act

    return hook


def test_a_rerun_of_the_columns_from_the_first_changed_one_equals_every_columns(setup):
    """Columns left of every change keep the clean run's keys and values: the rerun of the
    columns from `first` on gives the full forward's last logits for every hook kind, layer
    and first column (left padding included), and the hooked block sees only the columns from
    `first` (the fast path is the one under test)."""
    bridge, _, cases, _ = setup
    L = bridge.cfg.n_layers
    for ids, mask in ((cases.src_ids, cases.src_mask), (cases.dst_ids, cases.dst_mask)):
        run = Rerun(bridge, ids, mask)
        T = ids.shape[1]
        for li in range(L):
            for name in (f"blocks.{li}.hook_resid_post", f"blocks.{li}.hook_mlp_out",
                         f"blocks.{li}.attn.hook_z"):
                for n in (1, 3, T // 2):
                    hook = [(name, right_scaled(n))]
                    want = full_logits(bridge, ids, mask, hook)[:, -1]
                    got = run.logits(hook, first=T - n)
                    assert torch.allclose(got, want, atol=1e-5), (name, n)
        assert run.suffix
        widths = []

        def spy(act, hook, widths=widths):
            widths.append(act.shape[1])
            return act

        run.logits([("blocks.0.hook_resid_post", spy)], first=T - 3)
        assert widths == [3]  # only the columns from `first` ran
    assert attached_hooks(bridge) == 0


def test_a_rerun_whose_mask_is_not_per_query_reruns_every_column(setup, monkeypatch):
    """A block input of a shape the column cut does not know (a 2-D key mask) turns the cut
    off: `first` is then ignored and the answer still the full forward's."""
    bridge, _, cases, _ = setup
    ids, mask = cases.dst_ids, cases.dst_mask
    run = Rerun(bridge, ids, mask)
    args, kw = run.inputs[0]
    run.inputs[0] = (args, {**kw, "attention_mask": mask.clone()})
    assert run._keep_kv() is False
    run.inputs[0] = (args, {**kw, "extra_columns": torch.zeros(ids.shape)})
    assert run._keep_kv() is False


def test_a_rerun_cannot_be_changed_by_what_a_call_writes(setup):
    """An in-place hook on a kept input (the rotary cos of block 0, shared by every block) or a
    caller writing into the returned logits leaves every later call exact."""
    bridge, _, cases, _ = setup
    ids, mask = cases.dst_ids, cases.dst_mask
    run = Rerun(bridge, ids, mask)
    probe = [("blocks.1.hook_resid_post", scaled)]
    want = full_logits(bridge, ids, mask, probe)[:, -1]
    clean = full_logits(bridge, ids, mask)[:, -1]
    run.logits([("blocks.0.attn.hook_cos", scaled)])
    run.logits().mul_(0)
    assert torch.allclose(run.logits(probe), want, atol=1e-5)
    assert torch.equal(run.logits(), clean)


def test_hooks_the_rerun_cannot_take_go_to_the_full_forward(setup):
    """A hook TransformerLens gates behind a flag is refused as the full forward refuses it
    (never silently skipped); a filter function runs the full forward."""
    bridge, _, cases, _ = setup
    ids, mask = cases.dst_ids, cases.dst_mask
    run = Rerun(bridge, ids, mask)
    with pytest.raises(ValueError, match="use_attn_result"):
        run.logits([("blocks.1.attn.hook_result", scaled)])
    bridge.reset_hooks()

    def last_resid(name):
        return name == "blocks.1.hook_resid_post"

    assert torch.equal(run.logits([(last_resid, scaled)]),
                       full_logits(bridge, ids, mask, [(last_resid, scaled)])[:, -1])
    assert attached_hooks(bridge) == 0


def test_first_layer_is_the_lowest_block_a_hook_touches():
    assert first_layer([("blocks.7.hook_resid_post", None), ("blocks.12.attn.hook_z", None)]) == 7
    assert first_layer([("blocks.3.hook_mlp_out", None), ("hook_embed", None)]) is None
    assert first_layer([]) is None
    assert first_layer([(lambda name: True, None)]) is None


def test_logit_lens_last_layer_equals_the_logits(setup):
    bridge, _, cases, _ = setup
    lens = patching.logit_lens(bridge, cases)
    last_src = torch.log_softmax(full_logits(bridge, cases.src_ids, cases.src_mask)[:, -1], -1)
    last_dst = torch.log_softmax(full_logits(bridge, cases.dst_ids, cases.dst_mask)[:, -1], -1)
    kl = (last_src.exp() * (last_src - last_dst)).sum(-1)
    assert torch.allclose(torch.tensor(lens["kl"][:, -1]), kl, atol=1e-5)
    rank = (last_dst > last_dst.gather(1, cases.good[:, None])).sum(1)
    assert torch.equal(torch.tensor(lens["rank_c"][:, -1]), rank)
    assert (lens["kl"][:, 0] < 1e-6).all()  # the embedding of the deciding token: same input


def test_removing_attention_to_the_context_removes_its_influence(setup):
    """Ablating every head's attention to c in every layer makes the context view blind to c:
    with the context tokens' own positions masked out, the logits at the deciding position
    equal a run in which c is replaced by other tokens."""
    bridge, _, cases, _ = setup
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    hooks = lambda ctx: [(f"blocks.{i}.attn.hook_pattern",  # noqa: E731
                          patching.ablate_context_hook(ctx, list(range(H)))) for i in range(L)]
    a = full_logits(bridge, cases.dst_ids, cases.dst_mask, hooks(cases.ctx_B_W1))[:, -1]
    scrambled = cases.dst_ids.clone()
    scrambled[cases.ctx_B_W1] = (scrambled[cases.ctx_B_W1] + 7) % 90 + 4
    b = full_logits(bridge, scrambled, cases.dst_mask, hooks(cases.ctx_B_W1))[:, -1]
    assert torch.allclose(a, b, atol=1e-5)
    assert attached_hooks(bridge) == 0


def test_removing_every_heads_reading_of_the_prefix_gives_the_no_context_run(setup):
    """The `prefix` columns are everything [c, x] has before x, so removing every head's
    attention to them turns the context view into the no-context view (x's shifted positions
    do not matter under rotary embeddings); c's own tokens alone leave the newline that joins
    c to x readable, and the views still differ."""
    bridge, task, _, _ = setup
    tok = bridge.tokenizer
    levels = task.levels("test", 3)
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    rows = [(lv, ids("UR") + [tok.eos_token_id], ids("DR"), 1) for lv in levels]
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    every = [(li, h) for li in range(L) for h in range(H)]
    gaps = {}
    for ablate in patching.ABLATE:
        cases = patching.build_cases(tok, task, "state", rows, None, ablate)
        src = full_logits(bridge, cases.src_ids, cases.src_mask)[:, -1]
        out = full_logits(bridge, cases.dst_ids, cases.dst_mask,
                          patching.interventions.ablation_hooks(cases.ctx_B_W1, every))[:, -1]
        gaps[ablate] = float((out - src).abs().max())
    assert gaps["prefix"] < 1e-5
    assert gaps["context"] > 1e-3


def test_run_end_to_end_and_hooks_removed(setup, tmp_path):
    bridge, _, _, folder = setup
    rep = patching.main([str(folder), "--n-levels", "30", "--max-cases", "4", "--threads", "1",
                         "--n-random", "3", "--n-random-generate", "2",
                         "--out", str(tmp_path / "p")])
    (rep,) = rep["results"].values()
    assert rep["counts"]["levels"] == 30
    assert (tmp_path / "p.json").exists()
    if "harm" in rep:  # a random model rarely wins; when it does the tables are complete
        assert len(rep["forward"]["resid_groups"]["all"]["mean"]) == bridge.cfg.n_layers


def test_find_cases_takes_the_right_view_of_each_kind(monkeypatch, tok):
    """Harm cases are teacher-forced on the no-context response, help cases on the context
    response; the deciding tokens are the right view's and the wrong view's."""
    from nca_interp.patching import cases as cases_mod

    task = make_task("sokoban")
    levels = task.levels("test", 3)
    right = [ids for ids in (task.target(lv) for lv in levels)]
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]  # noqa
    wrong = enc("UUUUUUUU")
    # level 0: right without c only (harm); level 1: right with c only (help); 2: both right
    y0 = [enc(right[0]), wrong, enc(right[2])]
    y1 = [wrong, enc(right[1]), enc(right[2])]
    monkeypatch.setattr(cases_mod, "greedy_tokens",
                        lambda m, t, task, lv, ctx: y1 if ctx is not None else y0)
    for kind, lv, (r, w) in (("harm", 0, (y0[0], y1[0])), ("help", 1, (y1[1], y0[1]))):
        rows, controls, counts = cases_mod.find_cases(None, tok, task, "state", levels, kind)
        assert counts == {"levels": 3, "right_no_c": 2, "right_c": 2, "harm": 1, "help": 1,
                          "both": 1}
        ((level, right_resp, wrong_resp, t),) = rows
        assert level is levels[lv] and right_resp == r and wrong_resp == w
        assert r[:t] == w[:t] and r[t] != w[t]
        assert [c[0] for c in controls] == [levels[2]]
    with pytest.raises(ValueError, match="kind"):
        cases_mod.find_cases(None, tok, task, "state", levels, "harmful")


def test_heads_are_chosen_on_one_half_and_judged_on_the_other(monkeypatch, setup):
    """With a head that is best on half A and worst on half B, the held-out table names it as
    A's choice, gives it percentile 0 on B, and the random-head null never draws a chosen head."""
    from nca_interp.patching import heads as heads_mod

    bridge, task, cases, _ = setup
    four = cases.subset([0, 1, 2, 0])
    A, B = heads_mod.halves(4, 0)
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    abl = np.random.default_rng(0).uniform(0.1, 0.5, (4, L, H))
    abl[A, 0, 0], abl[B, 0, 0] = 0.9, 0.0  # A's best head, B's worst
    abl[B, L - 1, H - 1], abl[A, L - 1, H - 1] = 0.95, 0.0  # B's best head, A's worst
    seen = []

    def fake_effect(bridge, c, heads, lds=None, dst=None):
        seen.append(list(heads))
        return np.full(len(c), 0.5)

    monkeypatch.setattr(heads_mod, "ablation_effect", fake_effect)

    def fake_many(self, head_sets, ld_src=None, done=None):  # draws' effects and outcomes
        if ld_src is not None:  # a random draw (a chosen set's outcome has no effect)
            seen.extend(list(heads) for heads in head_sets)
        return [(None if ld_src is None else np.full(len(self.cases), 0.5),
                 np.zeros(len(self.cases), bool)) for _ in head_sets]

    monkeypatch.setattr(heads_mod.Outcomes, "many", fake_many)
    monkeypatch.setattr(heads_mod, "answered_right",
                        lambda b, t, c, heads, stops: np.zeros(len(c), bool))
    out = heads_mod.held_out_heads(bridge, task, four, None, abl, "harm", [1], [0],
                                   n_random=20, n_random_generate=5, stop=0)
    row = out["rows"][0]
    assert row["chosen_on_a"] == ["L0H0"] and row["chosen_on_b"] == [f"L{L - 1}H{H - 1}"]
    assert row["percentile"] == 0.0  # each choice is the worst head on the other half
    assert seen[0] == [(0, 0)] and seen[1] == [(L - 1, H - 1)]  # A's choice scored on B first
    nulls = seen[2:22]
    assert len(nulls) == 20 and all((0, 0) not in d and (L - 1, H - 1) not in d for d in nulls)
    # every draw equals the observed 0.5: p = (1 + 20) / (1 + 20)
    assert row["effect_null"]["n"] == 20 and row["effect_null"]["p"] == 1.0
    assert row["flipped_null"]["n"] == 5
    assert out["rows"][-1]["k"] == L * H and "effect_null" not in out["rows"][-1]
    assert "note" in heads_mod.held_out_heads(bridge, task, cases, None, abl[:3], "harm", [1],
                                              [0])



def test_halves_keep_a_unit_together_and_cases_of_their_own_split_as_before():
    from nca_interp.patching import heads as heads_mod

    units = ["a", "a", "b", "c", "c", "c", "d", "e", "e", "f"]
    for seed in range(20):
        A, B = heads_mod.halves(len(units), seed, units)
        assert sorted(A + B) == list(range(10)) and A and B
        assert not {units[i] for i in A} & {units[i] for i in B}, seed
        assert len({units[i] for i in A}) == 3  # half of the six units
        own = [str(i) for i in range(10)]
        assert heads_mod.halves(10, seed, own) == heads_mod.halves(10, seed)


def test_intervals_resample_units_and_cases_of_their_own_as_before():
    """Five values, each case asked three times (one unit): the interval is the five's, not
    the narrower one of fifteen independent cases; every case its own unit gives the interval
    without units, draw for draw."""
    from nca_interp.patching.heads import interval

    five = np.array([0.1, 0.9, 0.4, 0.7, 0.2])
    thrice, units = np.repeat(five, 3), [u for u in "abcde" for _ in range(3)]
    width = lambda s: s["hi"] - s["lo"]  # noqa: E731
    grouped, alone, loose = interval(thrice, units=units), interval(five), interval(thrice)
    assert grouped["mean"] == pytest.approx(alone["mean"])
    assert width(grouped) == pytest.approx(width(alone), rel=0.1)
    assert width(loose) < 0.75 * width(grouped)
    assert interval(thrice, units=[str(i) for i in range(15)]) == loose


def test_run_keeps_a_units_cases_in_one_half_and_resamples_them_together(monkeypatch, setup,
                                                                          tmp_path):
    """Each case found twice (one unit, the same level): the report's halves never split a
    level, and every interval is the units' one."""
    from nca_interp.patching.heads import interval

    bridge, task, cases, folder = setup
    tok = bridge.tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    once = [(cases.levels[0], ids("UR") + [tok.eos_token_id], ids("DR"), 0),
            (cases.levels[1], ids("LUR") + [tok.eos_token_id], ids("LD"), 1),
            (cases.levels[2], ids("RRD") + [tok.eos_token_id], ids("RRU"), 2)]
    rows = [row for row in once for _ in range(2)]
    monkeypatch.setattr(command, "find_cases", lambda *a: (
        rows, [], {"levels": 3, "right_no_c": 3, "right_c": 0, "harm": 6, "help": 0,
                   "both": 0}))
    rep = patching.run_checkpoint(str(folder), patching.PatchingConfig(
        task="sokoban", context="state", n_levels=3, ks=[1], n_random=2, n_random_generate=1,
        scope="groups", threads=1))
    units = [c["unit"] for c in rep["cases"]]
    assert len(units) == 6 and len(set(units)) == 3
    A, B = rep["heads"]["halves"]
    assert not {units[i] for i in A} & {units[i] for i in B}
    abl = rep["ablation"]
    assert {k: abl[k] for k in ("lo", "hi")} == {
        k: interval(np.array(abl["per_case"]), units=units)[k] for k in ("lo", "hi")}
    assert abl["lo"] != interval(np.array(abl["per_case"]))["lo"]

def test_null_summary_p_value():
    from nca_interp.patching.heads import null_summary

    s = null_summary([0.1, 0.2, 0.3, 0.9], 0.5)
    assert s["n"] == 4 and s["p"] == pytest.approx(2 / 5)
    assert null_summary([float("nan")], 0.5) == {"n": 0}


def test_a_null_stops_at_its_stop_th_hit_with_besag_cliffords_p():
    """Sequential p: stop / (draws up to the stop-th hit), draws beyond it (a block's
    overshoot) counted in the summary, not in p; short of `stop` hits, the fixed-n p."""
    from nca_interp.patching.heads import exceeded, null_summary

    draws = [0.9, 0.1, 0.8, 0.2, 0.7, 0.6, 0.1]  # hits (>= 0.5) at draws 1, 3, 5, 6
    s = null_summary(draws, 0.5, stop=3)
    assert s["p"] == pytest.approx(3 / 5) and s["n"] == 7 and s["stopped_at"] == 3
    assert exceeded(draws, 0.5, 3) and not exceeded(draws, 0.5, 5) and not exceeded(draws, .5, 0)
    unstopped = null_summary(draws, 0.5, stop=5)
    assert unstopped["p"] == pytest.approx(5 / 8) and "stopped_at" not in unstopped
    assert null_summary(draws, 0.5) == {k: v for k, v in unstopped.items()}


def test_random_draws_end_once_the_stop_is_reached(monkeypatch, setup):
    """A k whose random draws keep reaching the observed value stops drawing (both nulls) at
    the first block past `stop` hits; one that beats them draws all, with the fixed-n p."""
    from nca_interp.patching import heads as heads_mod

    bridge, task, cases, _ = setup
    four = cases.subset([0, 1, 2, 0])
    A, B = heads_mod.halves(4, 0)
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    abl = np.random.default_rng(0).uniform(0.1, 0.5, (4, L, H))
    abl[A, 0, 0], abl[B, L - 1, H - 1] = 0.9, 0.95  # each half's choice
    chosen = ([(0, 0)], [(L - 1, H - 1)])
    level, drawn = 0.5, []  # the random draws' effect and flipped rate

    def value(heads) -> float:
        if list(heads) in chosen:  # observed: effect 0.5, every harm case flipped
            return 1.0
        drawn.append(list(heads))
        return level

    monkeypatch.setattr(heads_mod, "ablation_effect", lambda bridge, c, heads, lds=None,
                        dst=None: np.full(len(c), 0.5 if list(heads) in chosen else value(heads)))
    monkeypatch.setattr(heads_mod.Outcomes, "many", lambda self, sets, ld_src=None, done=None: [
        (None if ld_src is None else np.full(len(self.cases), value(hs)),
         np.full(len(self.cases), value(hs) >= 0.5)) for hs in sets])
    monkeypatch.setattr(heads_mod, "answered_right",
                        lambda b, t, c, heads, stops: np.zeros(len(c), bool))
    row = heads_mod.held_out_heads(bridge, task, four, None, abl, "harm", [1], [0],
                                   n_random=100, n_random_generate=100, stop=10)["rows"][0]
    n = row["effect_null"]["n"]
    assert 10 <= n < 100 and row["flipped_null"]["n"] <= n
    assert row["effect_null"]["stopped_at"] == 10 and row["effect_null"]["p"] == 1.0
    level = 0.0  # no draw reaches the observed: all 100 drawn
    row = heads_mod.held_out_heads(bridge, task, four, None, abl, "harm", [1], [0],
                                   n_random=100, n_random_generate=100, stop=10)["rows"][0]
    assert row["effect_null"]["n"] == 100 and row["flipped_null"]["n"] == 100
    assert row["effect_null"]["p"] == pytest.approx(1 / 101) and "stopped_at" not in row[
        "effect_null"]


def test_per_head_panels_share_one_layer_order():
    """Every panel of the per-head figure puts layer 0 on top (a panel flipped against its
    neighbours reads L0 as L3)."""
    import json
    from pathlib import Path

    from nca_interp.plots import patching_figures

    rep = json.loads(Path("figures/sokoban_long/patching.json").read_text())["results"]
    fig = patching_figures(rep["sokoban_long_opd_s0"])["heads"]
    axes = [k for k in fig.layout if k.startswith("yaxis")]
    assert len(axes) == 3 and all(fig.layout[k].autorange == "reversed" for k in axes)


def test_no_checkpoint_named_runs_the_stated_demo_scope(tmp_path, monkeypatch, capsys):
    """`python -m nca_interp.patching` alone: the embedded OPD at the small demo scope, said in
    its first line; naming any scope field keeps the full defaults for the rest."""
    from nca_interp import patching

    seen = []

    def fake_run_checkpoint(path, cfg):
        seen.append(dataclasses.asdict(cfg))
        return {"checkpoint": "x/sokoban_opd", "task": "sokoban", "context": "plan"}

    monkeypatch.setattr(command, "run_checkpoint", fake_run_checkpoint)
    monkeypatch.setattr(command, "format_report", lambda r: "")
    monkeypatch.setattr(command, "figures", lambda r: {})
    patching.main(["--out", str(tmp_path / "p")])
    assert {k: seen[0][k] for k in patching.DEMO_SCOPE} == {
        k: (list(v) if isinstance(v, list) else v) for k, v in patching.DEMO_SCOPE.items()}
    assert "demo scope" in capsys.readouterr().out.splitlines()[0]
    patching.main(["--out", str(tmp_path / "p"), "--max-cases", "8"])
    assert seen[1]["scope"] == "full" and seen[1]["n_random"] == 100 and seen[1]["max_cases"] == 8


def test_a_shorter_c_than_the_default_system_message_lines_up_its_shared_tail(setup, tok):
    """A chat model's default system message replaced by a shorter c makes x the longer prompt:
    only the shared tail is aligned, and layer_sim at prompt positions and both patching
    sweeps run on it (they indexed [c, x]'s last len(x) columns before)."""
    from nca_interp import layer_sim

    bridge, _, _, folder = setup
    task = make_task("sokoban")
    plain = task.prompt
    default = "You are a helpful assistant with a long default system message. "
    object.__setattr__(task, "context", lambda lv, kind: "Be brief.")
    object.__setattr__(task, "prompt", lambda lv, c=None: plain(lv, default if c is None else c))
    levels = task.levels("test", 3)
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    rows = [(lv, ids("UR") + [tok.eos_token_id], ids("DR"), t) for lv, t in zip(levels, (0, 1, 2))]
    cases = patching.build_cases(tok, task, "state", rows, None)
    assert cases.dst_ids.shape[1] < cases.src_ids.shape[1]
    shared = [len(plain(lv, "")) for lv in levels]  # the prompt after the system text
    assert all(0 < n <= s for n, s in zip(cases.groups["x"].sum(1).tolist(), shared))
    stats = {"forwards": 0}
    for direction in ("forward", "reverse"):
        out = patching.sweep(bridge, cases, direction, stats, "groups")
        assert out["mlp"].shape == (3, bridge.cfg.n_layers)  # (NaN where the views' LDs tie)
    r = layer_sim.layer_similarity(folder, task, "state", levels, 3, "cpu", "prompt", None)
    assert 0 < r["n_positions"] <= sum(shared)
    assert attached_hooks(bridge) == 0


def reference_greedy(bridge, ids, mask, max_new, stops, pad, hooks):
    """Greedy decoding the plain way: the whole sequence rerun at every step."""
    out, done = [[] for _ in range(len(ids))], torch.zeros(len(ids), dtype=torch.bool)
    for _ in range(max_new):
        tok = full_logits(bridge, ids, mask, hooks)[:, -1].argmax(-1)
        for i in range(len(ids)):
            if not done[i]:
                out[i].append(int(tok[i]))
        done |= torch.isin(tok, torch.tensor(stops))
        if bool(done.all()):
            break
        ids = torch.cat([ids, torch.where(done, torch.full_like(tok, pad), tok)[:, None]], 1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return out


def lengths_run(bridge):
    """The sequence length of every forward the bridge runs, read at the embedding."""
    seen = []
    hook = ("hook_embed", lambda act, hook: seen.append(act.shape[1]))
    return seen, hook


def test_cached_greedy_decoding_equals_rerunning_the_sequence(setup, tok):
    """With the context-reading ablation of some heads active, the KV-cached greedy responses
    are the plain loop's, token for token, over a left-padded batch, and the steps after the
    first really run one token (the cache reaches the attention)."""
    from nca_interp.patching.interventions import ablation_hooks, greedy

    bridge, _, cases, _ = setup
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    ids, mask = cases.dst_prompt
    ctx = cases.ctx_B_W1[:, -ids.shape[1]:]
    # left padding is part of what is checked: row 0 three tokens shorter than the others
    pad_cols = torch.full_like(ids[:, :3], tok.pad_token_id or 0)
    ids = torch.cat([pad_cols, ids], 1)
    ids[1:, :3] = ids[1:, 3:6]
    mask = torch.cat([torch.ones_like(pad_cols), mask], 1)
    mask[0, :3] = 0
    ctx = torch.cat([torch.zeros_like(pad_cols, dtype=torch.bool), ctx], 1)
    hooks = ablation_hooks(ctx, [(li, h) for li in range(L) for h in range(0, H, 2)])
    stops, pad = [tok.eos_token_id], tok.pad_token_id or 0
    want = reference_greedy(bridge, ids, mask, 12, stops, pad, hooks)
    seen, count = lengths_run(bridge)
    got = greedy(bridge, ids, mask, 12, stops, pad, hooks + [count])
    assert got == want and max(map(len, want)) > 3
    assert greedy(bridge, ids, mask, 12, stops, pad, hooks, kv_cache=False) == want
    # prefill, the first step's full-forward check, one token per step, the last step's check
    n, steps = ids.shape[1], max(map(len, want))
    assert seen[:2] == [n, n + 1] and seen[2:-1] == [1] * (steps - 1)
    assert seen[-1] == n + steps - 1
    assert attached_hooks(bridge) == 0


def test_a_hook_whose_cached_effect_shows_late_reruns_the_whole_sequence(setup, tok):
    """A hook that, once the sequence has grown two tokens past the prompt, removes every
    position's attention to the prompt's first half (earlier positions too, which a cache has
    already kept unablated): the first step's check passes, the last step's does not, and the
    answers are decoded again the plain way (without that check one answer differs)."""
    from nca_interp.names import pattern_hook
    from nca_interp.patching.interventions import greedy

    bridge, _, cases, _ = setup
    ids, mask = cases.dst_prompt
    n = ids.shape[1]

    def late(p, hook):
        if p.shape[-1] >= n + 2:
            p[..., : n // 2] = 0
        return p

    hooks = [(pattern_hook(li), late) for li in range(bridge.cfg.n_layers)]
    stops, pad = [tok.eos_token_id], tok.pad_token_id or 0
    want = reference_greedy(bridge, ids, mask, 10, stops, pad, hooks)
    seen, count = lengths_run(bridge)
    assert greedy(bridge, ids, mask, 10, stops, pad, hooks + [count]) == want
    assert max(map(len, want)) > 3 and seen.count(n) == 2  # a second decoding from the prompt
    assert attached_hooks(bridge) == 0


def test_a_hook_the_cache_cannot_follow_reruns_the_whole_sequence(setup, tok):
    """A hook that copies the first column into the last (a different position at each step,
    and under a cache the new token's own) is not causal under a cache: the first step's check
    catches it and every step reruns the sequence, so the responses are still the plain
    loop's."""
    from nca_interp.patching.interventions import greedy

    bridge, _, cases, _ = setup
    ids, mask = cases.dst_prompt

    def last_column(act, hook):
        act[:, -1] = act[:, 0]
        return act

    hooks = [("blocks.0.hook_resid_post", last_column)]
    stops, pad = [tok.eos_token_id], tok.pad_token_id or 0
    want = reference_greedy(bridge, ids, mask, 8, stops, pad, hooks)
    seen, count = lengths_run(bridge)
    assert greedy(bridge, ids, mask, 8, stops, pad, hooks + [count]) == want
    assert seen[3:] and min(seen[3:]) > ids.shape[1]  # whole sequences after the check
    # a hook that writes the last W columns cannot take a one-column step at all: the failed
    # step reruns the sequence instead of stopping the decoding
    g = torch.Generator().manual_seed(0)
    src = torch.randn(len(ids), 5, bridge.cfg.d_model, generator=g) * 3
    hooks = [("blocks.0.hook_resid_post", patching.patch_hook(src, torch.ones(len(ids), 5,
                                                                              dtype=torch.bool)))]
    want = reference_greedy(bridge, ids, mask, 8, stops, pad, hooks)
    assert greedy(bridge, ids, mask, 8, stops, pad, hooks) == want
    assert attached_hooks(bridge) == 0


def test_a_window_the_decoding_may_outgrow_reruns_the_whole_sequence(tok, tmp_path):
    """A sliding-window model (Mistral, window 16) whose 14-column prompt fits the window but
    whose prompt and response do not: its cache would keep only the window's keys (the pattern's
    columns no longer counted from the left, and the first step, still inside the window,
    cannot show it), so every step reruns the sequence and the answers are the plain loop's."""
    import transformers as T

    from nca_interp.patching.interventions import ablation_hooks, greedy
    from nca_interp.patching.rerun import window

    cfg = T.MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=8, sliding_window=16, initializer_range=0.3,
                          tie_word_embeddings=False, pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = T.MistralForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(5)  # answers that change from step to step
    bridge = boot_bridge(save_checkpoint(tmp_path / "m", model, tok, {"task": TASK}))
    g = torch.Generator().manual_seed(1)
    ids = torch.full((3, 14), tok.pad_token_id)
    mask = torch.zeros(3, 14, dtype=torch.long)
    for i, n in enumerate([10, 12, 14]):
        ids[i, 14 - n:] = torch.randint(4, len(tok), (n,), generator=g)
        mask[i, 14 - n:] = 1
    ctx = (torch.rand(3, 14, generator=g) < 0.5) & mask.bool()
    hooks = ablation_hooks(ctx, [(li, h) for li in range(2) for h in (0, 2)])
    stops = [tok.eos_token_id]
    want = reference_greedy(bridge, ids, mask, 12, stops, tok.pad_token_id, hooks)
    seen, count = lengths_run(bridge)
    assert greedy(bridge, ids, mask, 12, stops, tok.pad_token_id, hooks + [count]) == want
    assert min(seen) >= 14  # never one column: the cache was not used
    # the window read from the config, and no window where none is used
    assert window(cfg) == 16 and window(None) == window(T.LlamaConfig()) == float("inf")
    assert window(T.Qwen2Config(sliding_window=8, use_sliding_window=False)) == float("inf")
    assert window(T.Gemma2Config(sliding_window=8)) == 8


def test_a_model_whose_attention_ignores_the_pattern_hook_is_patched_without_ablation(
        tok, tmp_path, monkeypatch, capsys):
    """OPT through TransformerLens 4.3's bridge computes attention without the hooked pattern:
    zeroing every pattern changes no logit, so a head ablation there would report effects of
    exactly 0. patching says so in one line and in the report (no ablation, no head table, a
    note), and still runs what does take effect there (residual and MLP patching, the logit
    lens, their figures); a model whose attention reads the pattern passes the probe."""
    import transformers as T

    from nca_interp.patching.interventions import pattern_edits_reach_logits

    cfg = T.OPTConfig(vocab_size=len(tok), hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                      num_attention_heads=4, word_embed_proj_dim=32, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    folder = save_checkpoint(tmp_path / "opt", T.OPTForCausalLM(cfg).eval(), tok, {"task": TASK})
    assert not pattern_edits_reach_logits(boot_bridge(folder))
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731

    def cases(model, tok_, task, ctx, levels, kind):  # an untrained model has no harm case
        rows = [(lv, ids("UR") + [tok.eos_token_id], ids("DR"), 0) for lv in levels]
        return rows, rows[:2], {"levels": len(levels), "right_no_c": len(levels),
                                "right_c": 0, "harm": len(levels), "help": 0, "both": 0}

    monkeypatch.setattr(command, "find_cases", cases)
    rep = patching.run(ckpt=[str(folder)], n_levels=4, threads=1, n_random=2,
                       n_random_generate=0, out=str(tmp_path / "p"))
    (r,) = rep.results.values()
    assert r.ablation is None and "pattern changes none" in r.heads["note"]
    assert "pattern changes none" in capsys.readouterr().err  # a warning: said in a notebook too
    fwd = np.array(r.forward["resid_groups"]["all"]["per_case"])
    assert fwd.shape == (4, 2) and np.isfinite(fwd).any()
    assert len(r.lens["kl"]["mean"]) == 3
    text = patching.format_report(r)
    assert "removing one head" not in text and "not measured" in text
    figs = plots.patching_figures(r)
    assert {"positions", "lens"} <= set(figs) and "head_selection" not in figs
    # the per-head figure shows the head outputs patched both ways, and no ablation panel
    assert "heads" in r.forward and len(figs["heads"].data) == 2
    # a setting's page renders it too, saying the ablation was not measured
    import json

    from nca_interp.paper import report

    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "patching.json").write_text(json.dumps(rep.to_json()))
    assert "not measured" in report.patching(tmp_path / "figs")
    assert pattern_edits_reach_logits(boot_bridge(save_checkpoint(
        tmp_path / "qwen", tiny(tok, seed=1), tok, {"task": TASK})))


def test_every_sweep_says_what_it_does_and_the_time_left(setup, monkeypatch, capsys):
    """A 39-minute patching run printed nothing until it ended: each sweep and the head
    ablation now show a bar on stderr with what they do, the count and the time left."""
    from nca_interp.patching.interventions import ablation, sweep

    bridge, _, cases, _ = setup
    monkeypatch.setenv("NCA_INTERP_QUIET", "0")
    stats = {"forwards": 0}
    sweep(bridge, cases, "forward", stats, "full")
    ablation(bridge, cases)
    err = capsys.readouterr().err
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    assert "patching: forward sweep (full, 3 cases)" in err
    assert f"0/{stats['forwards']} " in err  # its total: every forward the sweep runs
    assert "each head's reading of c removed" in err and f"0/{L * H} " in err
    assert "<" in err  # tqdm's elapsed<remaining


def test_the_case_search_says_what_it_does(setup, tok, monkeypatch, capsys):
    """Finding the cases greedy-decodes every level in both views: at 30 layers and 500 levels
    the longest phase of a run, silent until session 44. It now shows a bar per view."""
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.patching.cases import find_cases

    _, task, _, folder = setup
    model = load_checkpoint(folder)[0]
    monkeypatch.setenv("NCA_INTERP_QUIET", "0")
    find_cases(model, tok, task, "state", task.levels("test", 3), "harm")
    err = capsys.readouterr().err
    assert "patching: finding cases, greedy without c" in err
    assert "patching: finding cases, greedy with c" in err
