import json

import numpy as np
import pytest
import torch

from nca_interp import grad_align, layer_sim, masks, param_delta
from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import UsageError
from nca_interp.hooks import attached, attached_hooks, boot_bridge, capture
from nca_interp.rollout import encode
from tests.conftest import tiny


@pytest.fixture(scope="module")
def folders(tok, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    out = {}
    for arch in ("qwen3", "qwen2", "llama"):
        m = tiny(tok, arch)
        m.save_pretrained(root / arch)  # plain HF folders, as a user would bring
        tok.save_pretrained(root / arch)
        out[arch] = root / arch
    out["qwen3_b"] = save_checkpoint(root / "qwen3_b", tiny(tok, seed=5), tok)
    return out


def test_capture_matches_hf_hidden_states_and_removes_hooks(tok, folders):
    from nca_interp.checkpoint import load_checkpoint

    bridge = boot_bridge(folders["qwen3"])
    model, _ = load_checkpoint(folders["qwen3"])
    ids, mask = encode(tok, ["P__\n>UD", "a longer prompt\n>U"])
    got = capture(bridge, ids, mask, patterns=True)
    assert attached_hooks(bridge) == 0
    hf = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    L = got["resid"].shape[0] - 1
    for i in range(L):  # non-final layers (HF's last entry is after the final norm)
        if i < L - 1:
            assert torch.allclose(got["resid"][i + 1][mask.bool()], hf[i + 1][mask.bool()],
                                  atol=1e-5)
    assert got["pattern"].shape[:2] == (L, 2)
    with pytest.raises(IndexError):
        capture(bridge, ids + 10**6, mask)  # a failing call must not leave hooks behind
    assert attached_hooks(bridge) == 0
    with pytest.raises(RuntimeError):
        with attached(bridge):
            bridge.hook_dict["blocks.0.hook_resid_post"].add_hook(lambda act, hook: act)
            assert attached_hooks(bridge) > 0
            raise RuntimeError("a failure inside the block")
    assert attached_hooks(bridge) == 0


def test_identical_views_have_cosine_one():
    h = torch.randn(3, 4, 5, 16)
    mask = torch.ones(4, 5)
    r = layer_sim.similarity_by_layer(h, h.clone(), mask)
    for key in ("cos", "cos_centred", "cos_centred_view", "cka"):
        assert all(abs(v - 1) < 1e-9 for v in r[key])


def test_zero_vectors_have_no_cosine_and_do_not_read_as_orthogonal(tmp_path):
    """A random init zeroes its padding token's embedding: where that token sits in both
    views the states are identical (zero), and the cosine must not count them as 0. In memory
    and streamed alike, identical views with zero rows give cosine 1 everywhere."""
    h = torch.randn(2, 4, 5, 16)
    h[:, :, 3] = 0.0  # one position of every item is the zeroed token
    r = layer_sim.similarity_by_layer(h, h.clone(), torch.ones(4, 5))
    assert r["cos"] == pytest.approx([1.0, 1.0], abs=1e-12)
    assert all(v < 1 for v in r["cos_other"])  # different items: still a floor below 1
    stream = layer_sim.StreamedSimilarity(tmp_path)
    stream.add(h, h.clone(), torch.ones(4, 5, dtype=torch.long))
    assert stream.result()["cos"] == pytest.approx([1.0, 1.0], abs=1e-12)


def test_a_view_offset_drives_the_pooled_centred_cosine_to_minus_one():
    """Two views with the same token variation plus a large constant offset between them
    (what a random-init model's views look like): pooled centring gives -1, per-view centring
    gives 1, and offset_share says why."""
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(2, 3, 6, 16, dtype=torch.float64, generator=gen)
    shift = torch.zeros(16, dtype=torch.float64)
    shift[0] = 200.0
    r = layer_sim.similarity_by_layer(h, h + shift, torch.ones(3, 6))
    assert all(v < -0.99 for v in r["cos_centred"])
    assert all(abs(v - 1) < 1e-9 for v in r["cos_centred_view"])
    assert all(v > 0.99 for v in r["offset_share"])
    r0 = layer_sim.similarity_by_layer(h, h.clone(), torch.ones(3, 6))
    assert all(v == 0 for v in r0["offset_share"])


def test_cka_invariant_to_orthogonal_transform():
    X = torch.randn(50, 8, dtype=torch.float64)
    Y = X @ torch.randn(8, 8, dtype=torch.float64) + 0.3 * torch.randn(50, 8, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))
    assert abs(layer_sim.linear_cka(X, Y) - layer_sim.linear_cka(X @ Q, Y @ Q.T)) < 1e-9
    assert abs(layer_sim.linear_cka(X, 3 * X @ Q) - 1) < 1e-9


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_commands_on_custom_checkpoints(folders, tok, tmp_path, arch):
    path = str(folders[arch])
    rep = layer_sim.main([path, "--task", "sokoban", "--context", "state", "--n-levels", "6",
                          "--threads", "1", "--out", str(tmp_path / "ls")])
    assert set(rep["results"]) == {"random_init", arch}
    assert (tmp_path / "ls.html").exists()
    assert json.loads((tmp_path / "ls.json").read_text())["layers"][0] == "embed"
    ga = grad_align.main([path, "--teacher", path, "--task", "frozenlake", "--context", "plan",
                          "--batch", "8", "--threads", "1", "--out", str(tmp_path / "ga")])
    g = ga["results"][arch]["global"]  # student == teacher: ctx is zero, so it has no angle
    assert g["norm"]["ctx"] < 1e-4 * g["norm"]["opd"] and g["angle_deg"]["opd~ctx"] is None
    import shutil

    other = tmp_path / "other"
    tiny(tok, arch, seed=7).save_pretrained(other)
    tok.save_pretrained(other)
    pd = param_delta.main([path, "--init", str(other), "--out", str(tmp_path / "pd")])
    assert pd["results"][path]["global_rel"] > 0
    copy = str(shutil.copytree(path, tmp_path / "copy"))
    with pytest.raises(UsageError, match="holds the same weights as the checkpoint"):
        param_delta.run(ckpt=[path, copy], init=path)
    with pytest.raises(UsageError, match="is given twice"):
        param_delta.run(ckpt=[path, path])


def test_layer_sim_at_generating_positions(folders):
    """`at="generating"` compares the positions that produce the response (the last prompt
    token first), a different set from the response tokens' own positions."""
    from nca_interp.tasks import make_task

    task = make_task("sokoban")
    levels = task.levels("test", 3)
    own = layer_sim.layer_similarity(folders["qwen3"], task, "state", levels)
    gen = layer_sim.layer_similarity(folders["qwen3"], task, "state", levels, at="generating")
    assert own["mean_response_tokens"] == gen["mean_response_tokens"]
    assert own["cos"][0] == pytest.approx(1) and gen["cos"][0] == pytest.approx(1)  # same tokens
    assert own["cos"][1:] != pytest.approx(gen["cos"][1:])
    with pytest.raises(ValueError, match="at must be one of"):
        layer_sim.layer_similarity(folders["qwen3"], task, "state", levels, at="bogus")


def test_prompt_positions_align_the_shared_tokens(folders):
    """At x's positions both views hold the same tokens: the embeddings are identical (cos 1
    exactly) for every position compared, and every x token is compared."""
    from nca_interp.tasks import make_task

    task = make_task("sokoban")
    levels = task.levels("test", 4)
    r = layer_sim.layer_similarity(folders["qwen3"], task, "state", levels, at="prompt")
    assert r["cos"][0] == pytest.approx(1, abs=1e-12) and r["cka"][0] == pytest.approx(1)
    n_x = sum(len(task.prompt(lv)) for lv in levels)  # char tokenizer: one token per char
    assert r["n_positions"] == n_x


def test_shared_suffix_mask():
    x = torch.tensor([[0, 5, 6, 7], [8, 9, 6, 7]])
    xm = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    cx = torch.tensor([[1, 2, 5, 6, 7], [1, 2, 3, 6, 7]])  # row 1: only "6 7" is shared
    m = masks.shared_suffix_mask(x, xm, cx)
    assert m.tolist() == [[0, 1, 1, 1], [0, 0, 1, 1]]
    # x the longer prompt (a chat model's default system message replaced by a shorter c):
    # only its last len([c, x]) columns can be shared
    long_x = torch.tensor([[4, 4, 4, 9, 6, 7], [0, 0, 4, 5, 6, 7]])
    long_m = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    short_cx = torch.tensor([[3, 6, 7], [5, 6, 7]])
    got = masks.shared_suffix_mask(long_x, long_m, short_cx)
    assert got.tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]]


def test_uniform_attention_reads_the_context_at_ratio_one():
    """A pattern uniform over each query's visible keys gives ratio 1 in every head, whatever
    the context's length; all mass on the context gives 1 / share."""
    B, H, T = 2, 3, 9
    key_mask = torch.ones(B, T)
    key_mask[1, :2] = 0  # left padding
    causal = torch.tril(torch.ones(T, T)) * key_mask[:, None, :]
    uniform = (causal / causal.sum(-1, keepdim=True))[None, :, None].expand(1, B, H, T, T)
    is_ctx = torch.zeros(B, T)
    is_ctx[0, :4] = 1
    is_ctx[1, 2:5] = 1
    qpos = torch.tensor([[6, 7, 8], [6, 7, 8]])
    qmask = torch.ones(B, 3)
    r = layer_sim.context_attention(uniform, is_ctx, key_mask, qpos, qmask)
    assert torch.allclose(r["ratio_L_H"] / r["n"], torch.ones(1, H), atol=1e-6)
    on_ctx = is_ctx[:, None, :].expand(B, T, T) / is_ctx.sum(-1)[:, None, None]
    r = layer_sim.context_attention(on_ctx[None, :, None].expand(1, B, H, T, T), is_ctx,
                                    key_mask, qpos, qmask)
    share = torch.tensor([[4 / 7, 4 / 8, 4 / 9], [3 / 5, 3 / 6, 3 / 7]])
    assert torch.allclose(r["ratio_L_H"] / r["n"], (1 / share).mean().expand(1, H), atol=1e-5)


def test_every_model_sees_the_same_responses(folders, tmp_path):
    rep = layer_sim.main([str(folders["qwen3"]), str(folders["qwen3_b"]), "--task", "sokoban",
                          "--context", "state", "--n-levels", "5", "--threads", "1",
                          "--out", str(tmp_path / "ls")])
    counts = {r["n_positions"] for r in rep["results"].values()}
    assert len(counts) == 1 and len(rep["results"]) == 3  # random_init included
    assert "sokoban target" in rep["responses_from"]


def test_clustered_standard_error_counts_a_unit_once():
    """Items of one unit share their noise: asking each of 10 facts 4 ways (identical values
    within a fact) leaves the standard error of the 10 facts, not the 2x smaller one that 40
    independent items would give. Every item its own unit: the usual std / sqrt(n)."""
    gen = torch.Generator().manual_seed(0)
    facts = torch.randn(10, generator=gen, dtype=torch.float64)
    own = float(facts.std() / 10 ** 0.5)
    assert layer_sim.clustered_se(facts) == pytest.approx(own, rel=1e-12)
    assert layer_sim.clustered_se(facts, [str(i) for i in range(10)]) == pytest.approx(own)
    asked = facts.repeat_interleave(4)
    units = [f"fact{i}" for i in range(10) for _ in range(4)]
    assert layer_sim.clustered_se(asked, units) == pytest.approx(own, rel=1e-12)
    assert layer_sim.clustered_se(asked) < 0.6 * own  # read as independent: understated
    # the labels' order does not matter, only which items share a unit
    perm = torch.randperm(40, generator=gen)
    assert layer_sim.clustered_se(asked[perm], [units[i] for i in perm]) == pytest.approx(own)
    assert np.isnan(layer_sim.clustered_se(asked, ["one"] * 40))
    with pytest.raises(UsageError, match="unit labels"):
        layer_sim.clustered_se(asked, units[:3])


def test_streamed_similarity_equals_in_memory(tmp_path):
    """Three batches of different widths and masks, spilled and reduced layer by layer, give
    what `similarity_by_layer` gives on the whole padded tensor (float64, 1e-10)."""
    gen = torch.Generator().manual_seed(0)
    L, D, widths = 3, 8, (5, 2, 7)
    units = ["a", "a", "b", "c", "b", "d", "d", "d", "e", "a", "f", "e"]  # across batches
    stream = layer_sim.StreamedSimilarity(tmp_path)
    h0s, h1s, masks = [], [], []
    for w in widths:
        h0 = torch.randn(L, 4, w, D, generator=gen) + 2.0  # a shared offset, as real states
        h1 = h0 + 0.5 * torch.randn(L, 4, w, D, generator=gen)
        m = (torch.rand(4, w, generator=gen) > 0.3).long()
        m[0, 0] = 1
        stream.add(h0, h1, m)
        h0s.append(h0)
        h1s.append(h1)
        masks.append(m)
    W = max(widths)
    pad = lambda t: torch.nn.functional.pad(t, (0, 0, 0, W - t.shape[2]))  # noqa: E731
    ref = layer_sim.similarity_by_layer(torch.cat([pad(h) for h in h0s], 1),
                                        torch.cat([pad(h) for h in h1s], 1),
                                        torch.cat([torch.nn.functional.pad(m, (0, W - m.shape[1]))
                                                   for m in masks]), batch=4, units=units)
    got = stream.result(units)
    for key in layer_sim.STATS:
        assert got[key] == pytest.approx(ref[key], rel=1e-10), key
    assert got["cos_se"] != pytest.approx(stream.result()["cos_se"], rel=1e-3)  # units used



def test_the_different_item_floor_never_pairs_a_unit_with_itself(tmp_path):
    """Items of one unit (a fact asked twice) share their hidden state, units are orthogonal:
    paired with another unit's item, the floor is 0; the next item, whatever its unit (the rule
    of reports before session 35, OTHER_NEXT), pairs half of them with themselves: 0.5. In
    memory and streamed alike."""
    e = torch.eye(4)
    units = ["a", "a", "b", "b"]
    h = torch.stack([e[0], e[0], e[1], e[1]])[None, :, None, :].expand(2, 4, 3, 4).clone()
    mask = torch.ones(4, 3)
    stream = layer_sim.StreamedSimilarity(tmp_path)
    stream.add(h, h.clone(), mask)
    for rule, floor in ((layer_sim.OTHER_UNIT, 0.0), (layer_sim.OTHER_NEXT, 0.5)):
        got = layer_sim.similarity_by_layer(h, h.clone(), mask, units=units, other=rule)
        assert got["cos_other"] == pytest.approx([floor, floor]), rule
        assert stream.result(units, rule)["cos_other"] == pytest.approx([floor, floor]), rule
    assert layer_sim.similarity_by_layer(h, h.clone(), mask)["cos_other"] == [0.5, 0.5]
    assert [layer_sim.other_partner(i, ["x"] * 3, 3) for i in range(3)] == [1, 2, 0]

def test_every_analysis_has_run_and_figures():
    """The Python API: run(...) returns the report, figures(report) its plotly figures; the
    CLI is a wrapper (the embedded Sokoban checkpoints named, tiny sizes)."""
    import plotly.graph_objects as go

    from nca_interp import evaluate, grad_align, param_delta, patching, trajectory

    for mod in (evaluate, grad_align, param_delta, trajectory, layer_sim, patching):
        assert callable(mod.run) and callable(mod.figures), mod.__name__
    from nca_interp.assets import embedded

    base, opd, nca = (str(embedded(n)) for n in ("sokoban_base", "sokoban_opd", "sokoban_nca"))
    ev = evaluate.run([base], n_levels=6)
    assert list(ev)[:5] == ["config", "task", "context", "runs", "results"]
    pd = param_delta.run([opd, nca])
    assert pd["comparison"]["global_cos"] is not None
    ga = grad_align.run([opd], batch=4, micro_batch=2, parts=2)
    for report, mod in ((ev, evaluate), (pd, param_delta), (ga, grad_align)):
        figs = mod.figures(report)
        assert figs and all(isinstance(f, go.Figure) for f in figs.values())
    assert any(k.startswith("adam_") for k in param_delta.figures(pd))


def test_debiased_cka_and_the_anisotropy_floor():
    """Independent random token matrices: linear CKA is well above 0 (few tokens, many
    dimensions), the debiased CKA is near 0, and identical views score 1. A large direction
    shared by every hidden state makes the raw cosine of *different* items high (the
    anisotropy floor `cos_other`), which is what a 'cos >= 0.997' claim must stand clear of."""
    gen = torch.Generator().manual_seed(0)
    X, Y = torch.randn(40, 64, generator=gen), torch.randn(40, 64, generator=gen)
    assert layer_sim.linear_cka(X, Y) > 0.4
    assert abs(layer_sim.debiased_cka(X, Y)) < 0.1
    assert layer_sim.debiased_cka(X, X) == pytest.approx(1.0)
    h = torch.randn(2, 6, 5, 32, generator=gen)  # L B N D: 6 unrelated items
    r = layer_sim.similarity_by_layer(h, h.clone(), torch.ones(6, 5))
    assert all(abs(v) < 0.2 for v in r["cos_other"]) and all(v == pytest.approx(1.0)
                                                              for v in r["cos"])
    common = 10 * torch.randn(32, generator=gen)
    r = layer_sim.similarity_by_layer(h + common, h + common, torch.ones(6, 5))
    assert all(v > 0.95 for v in r["cos_other"])


def test_figure_titles_name_the_setting_and_seeds():
    """A folder's layer_sim figures look alike across settings: the title names the runs'
    setting and seeds (from the report's run identities), not only the task."""
    from nca_interp.analysis import from_json
    from nca_interp.plots import head_heatmaps, layer_sim_figure, runs_label

    def named(names):  # a report file without `runs`: identities from its pipeline names
        return from_json({"config": {}, "results": {n: {} for n in names}})

    names = ["random_init", "sokoban_base",
             *(f"sokoban_long_{m}_s{s}" for s in range(5) for m in ("opd", "nca"))]
    assert runs_label(named(names)) == "sokoban_long, seeds 0-4"
    assert runs_label(named(["x_opd_s0", "x_nca_s2"])) == "x, seeds 0, 2"
    row = {k: [1.0, 1.0] for k in ("cos", "cos_std", "cos_centred", "cka")}
    report = from_json({"task": "sokoban", "context": "plan", "layers": [0, 1], "config": {},
                        "results": {n: {**row, "ctx_attn": [1.0], "ctx_attn_ratio": [[1.0]]}
                                    for n in names}}, analysis="layer_sim")
    for fig in (layer_sim_figure(report), head_heatmaps(report)):
        assert "sokoban (sokoban_long, seeds 0-4)" in fig.layout.title.text


def test_redrawing_a_figure_rewrites_the_same_page(tmp_path):
    """HTML pages carry no random id: redrawing unchanged data leaves the committed file
    byte-identical (no churn in figures/ when a report is re-rendered)."""
    import plotly.graph_objects as go

    from nca_interp.plots import write_figure

    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    write_figure(fig, tmp_path / "a")
    first = (tmp_path / "a.html").read_bytes()
    write_figure(fig, tmp_path / "a")
    assert (tmp_path / "a.html").read_bytes() == first
