"""Shared-prefix caching (nca_interp.prefix) equals the full pass: logits, loss terms and
gradients, on each architecture; a cache never serves a model's old weights."""

import pytest
import torch

from nca_interp.forward import response_logits
from nca_interp.losses import combine, loss_terms
from nca_interp.prefix import PrefixCache, shared_prefix_len, split_prefix, view_logits
from nca_interp.rollout import Batch, encode
from tests.conftest import tiny

CONTEXT = "rules: push every box onto a goal\n"
XS = ["P__\n>", "a longer prompt\n>", "xy\n>", "P_#_O\n>"]


def batch(tok) -> Batch:
    x_ids, x_mask = encode(tok, XS)
    cx_ids, cx_mask = encode(tok, [CONTEXT + x for x in XS])
    gen = torch.Generator().manual_seed(0)
    resp = torch.randint(3, 60, (len(XS), 5), generator=gen)
    resp_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    return Batch(x_ids, x_mask, cx_ids, cx_mask, resp, resp_mask)


def test_shared_prefix_len_finds_the_first_difference():
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [0, 5, 6, 7, 9, 1], [5, 6, 7, 8, 2, 3]])
    mask = (ids != 0).long()
    mask[2, :] = 1
    assert shared_prefix_len(ids, mask) == 3  # 5 6 7, then 8 / 9 / 8
    same = torch.tensor([[0, 5, 6, 7], [5, 6, 7, 8]])
    assert shared_prefix_len(same, (same != 0).long()) == 2  # the shorter row keeps one token
    assert shared_prefix_len(torch.tensor([[1, 2], [3, 2]]), torch.ones(2, 2).long()) == 0


def test_split_prefix_rebuilds_every_row(tok):
    b = batch(tok)
    L = shared_prefix_len(b.cx_ids, b.cx_mask)
    assert L == len(tok(CONTEXT, add_special_tokens=False)["input_ids"])
    prefix, suffix, smask = split_prefix(b.cx_ids, b.cx_mask, L)
    for i in range(len(XS)):
        row = torch.cat([prefix[0], suffix[i][smask[i].bool()]])
        assert torch.equal(row, b.cx_ids[i][b.cx_mask[i].bool()])


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_view_logits_and_gradients_equal_the_full_pass(tok, arch):
    model = tiny(tok, arch)
    b = batch(tok)
    weights = torch.randn(len(XS), 5, len(tok), generator=torch.Generator().manual_seed(1))
    grads = []
    for fn in (response_logits, view_logits):
        model.zero_grad()
        logits = fn(model, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
        (logits * weights * b.resp_mask[..., None]).sum().backward()
        grads.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (full, g_full), (cached, g_cached) = grads
    valid = b.resp_mask.bool()
    assert torch.allclose(full[valid], cached[valid], atol=1e-5)
    for name, g in g_full.items():
        assert torch.allclose(g, g_cached[name], atol=1e-5, rtol=1e-4), name


def test_loss_terms_and_gradients_equal_uncached(tok):
    student, teacher = tiny(tok, seed=0), tiny(tok, seed=1)
    teacher.requires_grad_(False)
    b = batch(tok)
    out = []
    for share in (False, True):
        student.zero_grad()
        terms = loss_terms(student, teacher, b, ("opd", "nca", "ctx"), share_prefix=share,
                           prefix_cache=PrefixCache() if share else None)
        combine(terms, 0.5).backward()
        out.append(({k: v.item() for k, v in terms.items()},
                    [p.grad.clone() for p in student.parameters()]))
    (t_full, g_full), (t_cached, g_cached) = out
    for k in t_full:
        assert t_cached[k] == pytest.approx(t_full[k], rel=1e-5, abs=1e-7), k
    for a, c in zip(g_full, g_cached):
        assert torch.allclose(a, c, atol=1e-6, rtol=1e-4)


def test_a_cache_is_never_stale_after_an_optimizer_step(tok):
    """The teacher's cache is kept across steps; if the model it holds moves (here the cache
    is pointed at a model under training), the entry is recomputed, never served stale."""
    model = tiny(tok)
    b = batch(tok)
    cache = PrefixCache()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        with torch.no_grad():
            cached = view_logits(model, b.cx_ids, b.cx_mask, b.resp, b.resp_mask, cache)
            full = response_logits(model, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
        valid = b.resp_mask.bool()
        assert torch.allclose(full[valid], cached[valid], atol=1e-5)
        opt.zero_grad()
        response_logits(model, b.x_ids, b.x_mask, b.resp, b.resp_mask).pow(2).mean().backward()
        opt.step()
    assert cache.misses == 2 and cache.hits == 0
    with torch.no_grad():  # unchanged weights: the second call is a hit
        view_logits(model, b.cx_ids, b.cx_mask, b.resp, b.resp_mask, cache)
        view_logits(model, b.cx_ids, b.cx_mask, b.resp, b.resp_mask, cache)
    assert cache.hits == 1


def test_a_prefix_per_item_takes_the_full_pass(tok, monkeypatch):
    """Prompts with no shared prefix (Sokoban's per-item plans) never call the prefix path."""
    import nca_interp.prefix as prefix

    model = tiny(tok)
    ids, mask = encode(tok, ["plan: up\n" + XS[0], "box at 3\n" + XS[1]])
    resp, rmask = torch.tensor([[5, 6], [7, 8]]), torch.ones(2, 2).long()
    monkeypatch.setattr(prefix, "prefix_kv", lambda *a: pytest.fail("prefix path taken"))
    with torch.no_grad():
        got = view_logits(model, ids, mask, resp, rmask, PrefixCache())
        assert torch.equal(got, response_logits(model, ids, mask, resp, rmask))
