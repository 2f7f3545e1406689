"""param_delta: the streamed reduction against an in-memory float64 reference, shards, tied
embeddings, the seed-to-seed control and the Adam-normalised delta."""

import pytest
import torch
from safetensors.torch import load_file

from nca_interp import param_delta
from nca_interp.checkpoint import CheckpointError
from nca_interp.errors import UsageError
from nca_interp.models import ModelConfig, build_model
from nca_interp.names import module_of


def save(model, tok, folder, shard: str | None = None, dtype=None):
    if dtype is not None:
        model = model.to(dtype)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kw)
    tok.save_pretrained(folder)
    return folder


def perturbed(model, seed: int, scale: float = 1e-2):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return model


@pytest.fixture(scope="module")
def three(tok, tmp_path_factory):
    root = tmp_path_factory.mktemp("pd")
    cfg = ModelConfig("qwen3", 2, 32, 4, 2, 64, 256)
    w0 = save(build_model(cfg, tok, 0), tok, root / "w0")
    a = save(perturbed(build_model(cfg, tok, 0), 1), tok, root / "a")
    b = save(perturbed(build_model(cfg, tok, 0), 2), tok, root / "b")
    return w0, a, b


def reference(w0_dir, dirs):
    """In memory, float64: every tensor loaded whole, deltas per cell and their cosines."""
    w0 = {k: v.double() for k, v in load_file(w0_dir / "model.safetensors").items()}
    ds = [{k: v.double() - w0[k] for k, v in load_file(d / "model.safetensors").items()}
          for d in dirs]
    cells: dict[str, list[str]] = {}
    for n in w0:
        layer, module = module_of(n)
        cells.setdefault(f"{'all' if layer is None else layer}.{module}", []).append(n)
    flat = lambda t, names: torch.cat([t[n].flatten() for n in names])  # noqa: E731
    rel = {k: float(flat(ds[0], ns).norm() / flat(w0, ns).norm()) for k, ns in cells.items()}
    cos = {k: float(flat(ds[0], ns) @ flat(ds[1], ns) /
                    (flat(ds[0], ns).norm() * flat(ds[1], ns).norm())) for k, ns in cells.items()}
    return rel, cos


def test_streamed_equals_in_memory(three):
    w0, a, b = three
    result, gram = param_delta.deltas(w0, [str(a), str(b)])
    rel, cos = reference(w0, [a, b])
    got = result["results"][str(a)]["rel"]
    assert got.keys() == rel.keys()
    for k in rel:
        assert got[k] == pytest.approx(rel[k], rel=1e-10)
    got_cos, _ = param_delta.pair_cos(gram, 1, 2)
    for k in cos:
        assert got_cos[k] == pytest.approx(cos[k], rel=1e-10)


def test_chunked_rows_equal_whole_tensors(three, monkeypatch):
    w0, a, b = three
    whole, _ = param_delta.deltas(w0, [str(a)])
    monkeypatch.setattr("nca_interp.tensorfiles.CHUNK_ELEMENTS", 50)  # a few rows per chunk
    from nca_interp.tensorfiles import row_chunks

    monkeypatch.setattr(param_delta, "row_chunks", lambda shape: row_chunks(shape, 50))
    chunked, _ = param_delta.deltas(w0, [str(a)])
    for k, v in whole["results"][str(a)]["rel"].items():
        assert chunked["results"][str(a)]["rel"][k] == pytest.approx(v, rel=1e-10)


def test_sharded_and_single_file_give_identical_tables(tok, tmp_path):
    cfg = ModelConfig("qwen3", 2, 32, 4, 2, 64, 256)
    single = save(build_model(cfg, tok, 0), tok, tmp_path / "w0")
    shard = save(build_model(cfg, tok, 0), tok, tmp_path / "w0_sharded", shard="20KB")
    assert (shard / "model.safetensors.index.json").exists()
    a = save(perturbed(build_model(cfg, tok, 0), 1), tok, tmp_path / "a", shard="20KB")
    r1, _ = param_delta.deltas(single, [str(a)])
    r2, _ = param_delta.deltas(shard, [str(a)])
    assert r1["results"][str(a)] == r2["results"][str(a)]


def test_bf16_weights_read_as_stored(tok, tmp_path):
    cfg = ModelConfig("qwen3", 2, 32, 4, 2, 64, 256)
    w0 = save(build_model(cfg, tok, 0), tok, tmp_path / "w0", dtype=torch.bfloat16)
    a = save(perturbed(build_model(cfg, tok, 0), 1, 0.05), tok, tmp_path / "a",
             dtype=torch.bfloat16)
    r, _ = param_delta.deltas(w0, [str(a)])
    assert 0 < r["results"][str(a)]["global_rel"] < 1


def test_tied_embedding_counted_once(tok, tmp_path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hf = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=8, tie_word_embeddings=True)
    torch.manual_seed(0)
    m = Qwen3ForCausalLM(hf)
    w0 = save(m, tok, tmp_path / "w0")
    a = save(perturbed(m, 1), tok, tmp_path / "a")
    from safetensors.torch import save_file

    for folder in (w0, a):  # some writers store the tied matrix under both names
        f = folder / "model.safetensors"
        t = load_file(f)
        save_file({**t, "lm_head.weight": t["model.embed_tokens.weight"].clone()}, f,
                  metadata={"format": "pt"})
    result, gram = param_delta.deltas(w0, [str(a)])
    n_params = sum(p.numel() for p in m.parameters())  # shared matrix once
    assert gram.sizes["global"] == n_params
    assert "all.lm_head" not in result["results"][str(a)]["rel"]


def test_zero_delta_and_squares_sum(three):
    w0, a, _ = three
    same, _ = param_delta.deltas(w0, [str(w0)])
    assert same["results"][str(w0)]["global_rel"] == 0
    r, _ = param_delta.deltas(w0, [str(a)])
    t = r["results"][str(a)]
    assert sum(t["share"].values()) == pytest.approx(1.0)
    assert {"q_proj", "k_proj", "embed", "lm_head"} <= t["per_module"].keys()


def test_architecture_mismatch_refused(tok, three, tmp_path):
    w0, _, _ = three
    llama = save(build_model(ModelConfig("llama", 2, 32, 4, 2, 64, 256), tok, 0), tok,
                 tmp_path / "llama")
    with pytest.raises(CheckpointError, match="model_type"):
        param_delta.deltas(w0, [str(llama)])


def test_control_and_adam_normalisation(tok, three, tmp_path):
    from nca_interp.checkpoint import save_checkpoint

    w0, _, _ = three
    cfg = ModelConfig("qwen3", 2, 32, 4, 2, 64, 256)
    run = {"lr": 1e-3, "steps": 10, "warmup": 0}  # as if trained 10 steps at lr 1e-3
    a, b = (save_checkpoint(tmp_path / n, perturbed(build_model(cfg, tok, 0), s), tok, run)
            for n, s in (("a", 1), ("b", 2)))
    rep = param_delta.main([str(a), str(b), "--init", str(w0), "--control", f"{a},{b}",
                            "--out", str(tmp_path / "pd")])
    assert rep["control"]["global_cos"] == pytest.approx(rep["comparison"]["global_cos"])
    t = rep["results"][str(a)]
    # ||dW|| / (10 x 1e-3 x sqrt(n)): perturbation 1e-2 per element -> 1e-2 / 1e-2 = 1
    assert t["global_adam"] == pytest.approx(1.0, rel=0.02)
    with pytest.raises(ValueError, match="--control"):
        param_delta.main([str(a), str(b), "--init", str(w0), "--control", str(a),
                          "--out", str(tmp_path / "pd")])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gram_blocks_and_threads_are_exact(threads):
    """Several cache blocks per chunk, split between threads, and chunks of uneven length:
    the K x K products equal a float64 numpy reference (deltas formed from bf16 weights)."""
    import numpy as np

    from nca_interp.reduce import BLOCK_ELEMENTS, Gram

    gen = torch.Generator().manual_seed(0)
    n = 5 * BLOCK_ELEMENTS + 123
    w0 = torch.randn(n, generator=gen).bfloat16()
    ws = [(w0.float() + 1e-3 * torch.randn(n, generator=gen)).bfloat16() for _ in range(2)]
    cuts = [0, 7, 2 * BLOCK_ELEMENTS + 1, n]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for delta in (False, True):
            g = Gram(["w0", "a", "b"])
            g.add("model.layers.0.self_attn.q_proj.weight",
                  ([v[a:b] for v in (w0, *ws)] for a, b in zip(cuts, cuts[1:])), delta=delta)
            V = np.stack([v.double().numpy() for v in (w0, *ws)])
            if delta:
                V[1:] -= V[0]
            ref = V @ V.T
            np.testing.assert_allclose(g.mats["global"], ref, rtol=1e-12)
            assert g.sizes["global"] == n
    finally:
        torch.set_num_threads(before)
    assert torch.get_num_threads() == before


def test_prefetch_keeps_order_raises_and_stops():
    """The read-ahead thread yields every item in order, hands the reader's exception to the
    consumer, and stops reading when the consumer stops early."""
    import threading

    from nca_interp.tensorfiles import prefetch

    assert list(prefetch(iter(range(50)), depth=3)) == list(range(50))

    def broken():
        yield 1
        raise OSError("shard truncated")

    with pytest.raises(OSError, match="truncated"):
        list(prefetch(broken()))

    read = []

    def counted():
        for i in range(1000):
            read.append(i)
            yield i

    for i in prefetch(counted(), depth=2):
        if i == 3:
            break
    assert len(read) <= 3 + 2 + 2  # consumed, queued, one in the reader's hand
    assert not any(t.name.startswith("Thread") and t.is_alive() and t.daemon
                   for t in threading.enumerate() if t is not threading.current_thread())


def test_stream_by_name_equals_per_parameter_adds():
    """Chunks of several parameters streamed through the read-ahead give the same groups and
    sizes as one add per parameter."""
    import numpy as np

    from nca_interp.reduce import Gram, stream_by_name

    gen = torch.Generator().manual_seed(1)
    params = {f"model.layers.{i}.self_attn.{m}.weight": [torch.randn(40, 8, generator=gen)
                                                        for _ in range(3)]
              for i in range(2) for m in ("q_proj", "k_proj")}
    direct = Gram(["w0", "a", "b"])
    for name, vecs in params.items():
        direct.add(name, ([v[a:a + 16] for v in vecs] for a in range(0, 40, 16)), delta=True)
    streamed = Gram(["w0", "a", "b"])
    stream_by_name(streamed, ((name, [v[a:a + 16] for v in vecs])
                              for name, vecs in params.items() for a in range(0, 40, 16)),
                   delta=True)
    assert direct.mats.keys() == streamed.mats.keys() and direct.sizes == streamed.sizes
    for k in direct.mats:
        np.testing.assert_allclose(streamed.mats[k], direct.mats[k], rtol=1e-12)


def test_tensor_folder_reads_what_safetensors_reads(tmp_path):
    """Row ranges read with plain file reads equal safetensors' own loading, for every dtype
    the reader decodes itself, scalars and empty row ranges; a truncated file is refused."""
    from safetensors.torch import load_file, save_file

    from nca_interp.tensorfiles import TensorFolder

    gen = torch.Generator().manual_seed(0)
    tensors = {f"t.{d}": (torch.randn(7, 3, generator=gen) * 100).to(d)
               for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16,
                         torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)}
    tensors["mask"] = torch.rand(5, generator=gen) > 0.5
    tensors["scalar"] = torch.tensor(3.25)
    save_file(tensors, tmp_path / "model.safetensors")
    ref = load_file(tmp_path / "model.safetensors")
    f = TensorFolder(tmp_path)
    assert sorted(f.names()) == sorted(tensors)
    for name, t in ref.items():
        assert f.shape(name) == tuple(t.shape)
        assert torch.equal(f.get(name), t) and f.get(name).dtype == t.dtype
        if t.dim():
            for a, b in ((0, 1), (2, 5), (3, 3), (4, t.shape[0])):
                got = f.rows(name, a, b)
                assert got.dtype == t.dtype and torch.equal(got, t[a:b])
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-10])
    with pytest.raises(ValueError, match="truncated|outside the file"):
        TensorFolder(tmp_path)


def test_prefetch_never_hangs_when_the_consumer_stops_at_the_end():
    """The reader has read everything and waits to queue its end marker on a full queue when
    the consumer stops: closing the generator must still return (it used to block forever)."""
    import threading
    import time

    from nca_interp.tensorfiles import prefetch

    def consume():
        for _ in prefetch(iter(range(2)), depth=1):
            time.sleep(0.3)  # the reader finishes and fills the queue meanwhile
            break

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive()


def test_malformed_safetensors_header_is_a_clear_error(tmp_path):
    import json as js

    from nca_interp.tensorfiles import TensorFolder

    header = js.dumps({"w": {"dtype": "F32", "shape": [2]}}).encode()  # no data_offsets
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header
                                                 + bytes(8))
    with pytest.raises(ValueError, match="malformed safetensors header entry for 'w'"):
        TensorFolder(tmp_path)


# -- the fault probe of issue #71 (and #70 item 7) --------------------------------------------

def test_two_checkpoints_of_one_folder_name_keep_both_figures(three, tmp_path):
    """da/m and db/m: the figures were keyed by the folder name, so one `o6_m.html` held the
    second checkpoint's and the first's was lost without a word."""
    import shutil

    w0, a, b = three
    da, db = tmp_path / "da" / "m", tmp_path / "db" / "m"
    shutil.copytree(a, da)
    shutil.copytree(b, db)
    rep = param_delta.main([str(da), str(db), "--init", str(w0), "--out", str(tmp_path / "o6")])
    figs = param_delta.figures(rep)
    per_ckpt = [k for k in figs if k not in ("cos", "specific", "control_cos")]
    assert len(per_ckpt) == 2 and len({figs[k].layout.title.text for k in per_ckpt}) == 2
    written = {p.name for p in tmp_path.glob("o6_*.html")}
    assert {"o6_da_m.html", "o6_db_m.html"} <= written


def test_figure_names_stay_the_folder_names_where_those_are_unique(three):
    """Published figures keep their names (`<stem>_<folder>.html`); a clash with a comparison
    figure or another checkpoint's safe name is resolved, never overwritten."""
    assert param_delta.figure_names(["runs/opd", "runs/nca"]) == {"runs/opd": "opd",
                                                                 "runs/nca": "nca"}
    got = param_delta.figure_names(["x/cos", "a/m", "b/m", "a_m"])
    assert len(set(got.values())) == 4 and "cos" not in got.values()


def test_a_pair_of_one_checkpoint_with_itself_is_refused_before_any_work(three, monkeypatch):
    """--pair A,A printed cos = 1.0 everywhere (the delta against itself); --control C,C the
    same as a seed-to-seed baseline."""
    w0, a, b = three
    monkeypatch.setattr(param_delta, "stream_deltas", lambda *a, **k: pytest.fail("work done"))
    for flag in ("pair", "control"):
        with pytest.raises(UsageError, match=f"--{flag} .*itself"):
            param_delta.run(ckpt=[str(a), str(b)], init=str(w0), **{flag: [str(a), str(a)]})


def test_a_comma_in_a_path_is_written_escaped_or_quoted(three, tmp_path):
    """`--pair 'op\\,d,B'` was split into ['op\\', 'd', 'B'] and refused without saying how to
    write a comma; it and `"op,d",B` are read as the task options' values are."""
    import shutil

    w0, a, b = three
    comma = tmp_path / "op,d"
    shutil.copytree(a, comma)
    escaped = str(comma).replace(",", "\\,")
    for written in (f"{escaped},{b}", f'"{comma}",{b}'):
        rep = param_delta.main([str(comma), str(b), "--init", str(w0), "--pair", written,
                                "--control", written, "--out", str(tmp_path / "pd")])
        assert rep["comparison"]["a"] == str(comma) and rep["control"]["a"] == str(comma)
    with pytest.raises(UsageError, match=r"--pair takes two .*write a comma inside a path as "
                                         r"\\,"):
        param_delta.main([str(comma), str(b), "--init", str(w0), "--pair", f"{comma},{b}",
                          "--out", str(tmp_path / "pd")])


def trained(tok, folder, seed, run=None, step=None):
    """A checkpoint `perturbed` from the common init, with a run config and a trainer state
    recording `step` (HF's key, `global_step`, where run is None: a foreign checkpoint)."""
    from nca_interp.checkpoint import save_checkpoint

    cfg = ModelConfig("qwen3", 2, 32, 4, 2, 64, 256)
    state = None if step is None else ({}, {"step": step} if run else {"global_step": step})
    return save_checkpoint(folder, perturbed(build_model(cfg, tok, 0), seed), tok, run, state)


def test_each_checkpoint_counts_its_own_steps(tok, three, tmp_path):
    """One --steps for every checkpoint gave a step-5 checkpoint beside step-10 ones a budget
    twice its own without a word; a run folder published at step 5 of 10 read 10 from its run
    config."""
    from nca_interp.checkpoint import publish

    w0, _, _ = three
    run = {"lr": 1e-3, "steps": 10, "warmup": 0}
    halfway = trained(tok, tmp_path / "halfway", 1, run)
    step5 = trained(tok, halfway / "checkpoints" / "step_000005", 1, run, step=5)
    publish(step5, halfway)
    done = trained(tok, tmp_path / "done", 2, run)
    rep = param_delta.run(ckpt=[str(halfway), str(done)], init=str(w0))
    assert rep["results"][str(halfway)]["lr_budget"] == pytest.approx(5e-3)
    assert rep["results"][str(done)]["lr_budget"] == pytest.approx(10e-3)

    foreign5 = trained(tok, tmp_path / "foreign5", 3, step=5)  # HF trainer_state: global_step
    foreign = trained(tok, tmp_path / "foreign", 4)  # records nothing
    both = [str(foreign5), str(foreign)]
    rep = param_delta.run(ckpt=both, init=str(w0), lr=1e-3)  # its own 5 steps, with --lr
    assert rep["results"][str(foreign5)]["lr_budget"] == pytest.approx(5e-3)
    assert rep["results"][str(foreign)]["lr_budget"] is None
    with pytest.raises(UsageError, match=r"--steps 10 is one count for every checkpoint, but "
                                         r".*foreign5 records 5 .*--steps 5,N"):
        param_delta.run(ckpt=both, init=str(w0), lr=1e-3, steps=10)
    rep = param_delta.run(ckpt=both, init=str(w0), lr=1e-3, steps=[5, 10])
    assert rep["results"][str(foreign)]["lr_budget"] == pytest.approx(10e-3)
    with pytest.raises(UsageError, match=r"--steps gives .*foreign5 7 steps, but its trainer "
                                         r"state records 5"):
        param_delta.run(ckpt=both, init=str(w0), lr=1e-3, steps=[7, 10])
    with pytest.raises(UsageError, match="--steps takes one count or one per checkpoint"):
        param_delta.run(ckpt=both, init=str(w0), lr=1e-3, steps=[5, 10, 20])


def test_each_checkpoint_takes_its_own_lr_and_a_rate_against_its_record_is_refused(
        tok, three, tmp_path):
    """#70 item 7: the Adam view's lr per checkpoint. Two foreign checkpoints trained at
    different rates take one --lr each; a --lr against a run config's own rate was used
    silently in its place (now refused, naming the checkpoint and both rates)."""
    w0, _, _ = three
    slow = trained(tok, tmp_path / "slow", 1)  # foreign: no run config
    fast = trained(tok, tmp_path / "fast", 2)
    both = [str(slow), str(fast)]
    rep = param_delta.run(ckpt=both, init=str(w0), lr=[1e-4, 1e-3], steps=10)
    assert rep["results"][str(slow)]["lr_budget"] == pytest.approx(1e-3)
    assert rep["results"][str(fast)]["lr_budget"] == pytest.approx(1e-2)
    with pytest.raises(UsageError, match="--lr takes one rate or one per checkpoint"):
        param_delta.run(ckpt=both, init=str(w0), lr=[1e-4, 1e-3, 1e-2], steps=10)
    here = trained(tok, tmp_path / "here", 3, {"lr": 1e-3, "steps": 10, "warmup": 0})
    mixed = [str(slow), str(here)]
    with pytest.raises(UsageError, match=r"--lr 0.0001 is one rate for every checkpoint, but "
                                         r".*here records 0.001"):
        param_delta.run(ckpt=mixed, init=str(w0), lr=1e-4, steps=10)
    with pytest.raises(UsageError, match=r"--lr gives .*here 0.002, but its run config "
                                         r"records 0.001"):
        param_delta.run(ckpt=mixed, init=str(w0), lr=[1e-4, 2e-3], steps=10)
    rep = param_delta.run(ckpt=mixed, init=str(w0), lr=[1e-4, 1e-3], steps=10)
    assert rep["results"][str(here)]["lr_budget"] == pytest.approx(1e-2)


def test_two_copies_of_one_checkpoint_are_refused_as_a_pair(three, tmp_path, monkeypatch):
    """Two folders of identical weights (a copy of one run) printed cos 1.0 everywhere without
    a word (SILENT in #71's third probe); the itself check compared only paths."""
    import shutil

    w0, a, b = three
    copy = tmp_path / "a_copy"
    shutil.copytree(a, copy)
    monkeypatch.setattr(param_delta, "stream_deltas", lambda *a, **k: pytest.fail("work done"))
    for kw in ({"pair": [str(a), str(copy)]}, {"control": [str(a), str(copy)]}):
        with pytest.raises(UsageError, match="the two checkpoints hold the same weights"):
            param_delta.run(ckpt=[str(a), str(copy), str(b)], init=str(w0), **kw)


def test_a_default_pair_of_the_same_weights_is_said_and_not_compared(three, tmp_path, capsys):
    """Without --pair the first two checkpoints are compared: two copies of one run get their
    tables and a note, no cos 1 comparison."""
    import shutil

    w0, a, b = three
    copy = tmp_path / "a_copy"
    shutil.copytree(a, copy)
    rep = param_delta.run(ckpt=[str(a), str(copy), str(b)], init=str(w0))
    assert rep.get("comparison") is None and str(copy) in rep["results"]
    assert "hold the same weights" in capsys.readouterr().err


def test_a_renamed_step_folder_is_refused(tok, three, tmp_path):
    """A step_000005 renamed step_000900 read as 900 steps' budget (SILENT in #71's third
    probe): the trainer state's step must be the folder's."""
    w0, _, b = three
    run = {"lr": 1e-3, "steps": 10, "warmup": 0}
    step = trained(tok, tmp_path / "r" / "checkpoints" / "step_000005", 1, run, step=5)
    moved = step.rename(step.with_name("step_000900"))
    with pytest.raises(CheckpointError, match="records step 5, not the 900 its folder"):
        param_delta.run(ckpt=[str(moved), str(b)], init=str(w0))


def test_a_trajectory_refuses_a_renamed_step_folder(tok, three, tmp_path):
    """trajectory placed a step folder's row by its name alone (SILENT in #71's third probe);
    grad_align's step labels likewise (runs.step_of)."""
    from nca_interp.runs import step_of
    from nca_interp.trajectory import checkpoints_of

    w0, _, _ = three
    run = {"lr": 1e-3, "steps": 10, "warmup": 0, "student": str(w0)}
    root = trained(tok, tmp_path / "r", 1, run)
    trained(tok, root / "checkpoints" / "step_000005", 1, run, step=5)
    assert [s for s, _ in checkpoints_of(str(root))] == [0, 5]
    moved = (root / "checkpoints" / "step_000005").rename(root / "checkpoints" / "step_000900")
    with pytest.raises(CheckpointError, match="records step 5, not the 900 its folder"):
        checkpoints_of(str(root))
    with pytest.raises(CheckpointError, match="records step 5, not the 900 its folder"):
        step_of(str(moved))
    moved.rename(root / "checkpoints" / "final")  # the fourth probe: the trajectory ended early
    with pytest.raises(UsageError, match="final is not a step checkpoint"):
        checkpoints_of(str(root))


def test_an_init_that_is_one_of_the_compared_checkpoints_is_refused(three, monkeypatch):
    """--init OPD with OPD and NCA compared gave OPD a zero column and measured NCA from OPD
    (SILENT in #71's fourth probe)."""
    w0, a, b = three
    monkeypatch.setattr(param_delta, "stream_deltas", lambda *a, **k: pytest.fail("work done"))
    with pytest.raises(UsageError, match="holds the same weights as the checkpoint"):
        param_delta.run(ckpt=[str(a), str(b)], init=str(a))


@pytest.mark.parametrize("record", [{"lr": float("nan"), "steps": 10},
                                    {"lr": 1e-3, "steps": -5}, {"lr": "1e-3", "steps": 10}])
def test_a_damaged_learning_rate_record_is_named_not_read_as_none(tok, tmp_path, record):
    """probe 12 U-C: lr NaN and steps -5 in a run config printed "no learning rate and steps
    recorded", which was untrue: the record is there and damaged, and is named as such."""
    from nca_interp.param_delta import lr_budget

    folder = trained(tok, tmp_path / "r", 1, {**record, "warmup": 0})
    with pytest.raises(UsageError, match="run_config.json records lr=.*damaged"):
        lr_budget(folder)
    good = trained(tok, tmp_path / "g", 1, {"lr": 1e-3, "steps": 4, "warmup": 0})
    assert lr_budget(good) == pytest.approx(4e-3)
