"""patching: properties any correct activation patching must have."""

import pytest
import torch

from nca_interp import patching
from nca_interp.checkpoint import save_checkpoint
from nca_interp.hooks import attached_hooks, boot_bridge
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


def test_run_end_to_end_and_hooks_removed(setup, tmp_path):
    bridge, _, _, folder = setup
    rep = patching.main([str(folder), "--n-levels", "30", "--max-cases", "4", "--threads", "1",
                         "--out", str(tmp_path / "p")])
    (rep,) = rep["results"].values()
    assert rep["counts"]["levels"] == 30
    assert (tmp_path / "p.json").exists()
    if "harm" in rep:  # a random model rarely wins; when it does the tables are complete
        assert len(rep["forward"]["resid_groups"]["all"]["mean"]) == bridge.cfg.n_layers
