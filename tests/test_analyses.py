import json

import pytest
import torch

from nca_interp import grad_align, layer_sim, param_delta
from nca_interp.checkpoint import save_checkpoint
from nca_interp.hooks import attached_hooks, boot_bridge, capture
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


def test_identical_views_have_cosine_one():
    h = torch.randn(3, 4, 5, 16)
    mask = torch.ones(4, 5)
    r = layer_sim.similarity_by_layer(h, h.clone(), mask)
    for key in ("cos", "cos_centred", "cka"):
        assert all(abs(v - 1) < 1e-9 for v in r[key])


def test_cka_invariant_to_orthogonal_transform():
    X = torch.randn(50, 8, dtype=torch.float64)
    Y = X @ torch.randn(8, 8, dtype=torch.float64) + 0.3 * torch.randn(50, 8, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))
    assert abs(layer_sim.linear_cka(X, Y) - layer_sim.linear_cka(X @ Q, Y @ Q.T)) < 1e-9
    assert abs(layer_sim.linear_cka(X, 3 * X @ Q) - 1) < 1e-9


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_commands_on_custom_checkpoints(folders, tmp_path, arch):
    path = str(folders[arch])
    rep = layer_sim.main([path, "--task", "sokoban", "--context", "state", "--n-levels", "6",
                          "--threads", "1", "--out", str(tmp_path / "ls")])
    assert set(rep["results"]) == {"random_init", arch}
    assert (tmp_path / "ls.html").exists()
    assert json.loads((tmp_path / "ls.json").read_text())["layers"][0] == "embed"
    ga = grad_align.main([path, "--teacher", path, "--task", "frozenlake", "--context", "plan",
                          "--batch", "4", "--threads", "1", "--out", str(tmp_path / "ga")])
    g = ga["results"][arch]["global"]  # student == teacher: ctx is zero, so it has no angle
    assert g["norm"]["ctx"] < 1e-4 * g["norm"]["opd"] and g["angle_deg"]["opd~ctx"] is None
    pd = param_delta.main([path, path, "--init", path, "--out", str(tmp_path / "pd")])
    assert pd["per_checkpoint"][path]["global_rel"] == 0


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
    with pytest.raises(ValueError, match="response or generating"):
        layer_sim.layer_similarity(folders["qwen3"], task, "state", levels, at="prompt")
