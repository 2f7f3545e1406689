import pytest
import torch

from nca_interp.losses import combine, loss_terms, token_kl
from nca_interp.rollout import onpolicy_batch
from nca_interp.tasks import make_task
from tests.conftest import tiny


def rand_logits(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3


def test_kl_properties():
    p, q = rand_logits(3, 5, 11), rand_logits(3, 5, 11, seed=1)
    mask = torch.ones(3, 5)
    assert token_kl(p, p, mask).abs() < 1e-6
    assert token_kl(p, q, mask) > 0
    assert token_kl(q, p, mask) > 0


def test_kl_matches_torch_distributions():
    p, q = rand_logits(2, 4, 9), rand_logits(2, 4, 9, seed=2)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    ref = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=p),
                                            torch.distributions.Categorical(logits=q))
    expected = (ref * mask).sum() / mask.sum()
    assert torch.allclose(token_kl(p, q, mask), expected, atol=1e-6)


def test_top_k_full_vocab_equals_full():
    p, q = rand_logits(2, 3, 7), rand_logits(2, 3, 7, seed=3)
    mask = torch.ones(2, 3)
    for renorm in (True, False):
        assert torch.allclose(token_kl(p, q, mask, top_k=7, renormalize=renorm),
                              token_kl(p, q, mask), atol=1e-6)
    assert token_kl(p, q, mask, top_k=2) >= 0


@pytest.fixture
def batch(tok):
    task = make_task("sokoban")
    levels = [task.level(i) for i in range(4)]
    student = tiny(tok)
    b, _, _ = onpolicy_batch(student, tok, task, levels, "state", 8, 1.0,
                             torch.Generator().manual_seed(0))
    return student, b


def test_opd_zero_for_same_model_same_prompt(batch):
    student, b = batch
    same_view = type(b)(b.x_ids, b.x_mask, b.x_ids, b.x_mask, b.resp, b.resp_mask)
    terms = loss_terms(student, student, same_view, ("opd", "nca", "ctx"))
    assert all(v.abs() < 1e-6 for v in terms.values())
    real = loss_terms(student, student, b, ("opd", "nca", "ctx"))
    assert real["opd"] > 0 and real["nca"] > 0  # the views differ by the context
    assert real["ctx"].abs() < 1e-6  # teacher == student: the context views coincide


def test_nca_zero_when_output_ignores_context(tok, batch):
    _, b = batch
    blind = tiny(tok)
    for p in blind.parameters():  # every logit constant: the output ignores its input
        torch.nn.init.zeros_(p)
    assert loss_terms(blind, blind, b, ("nca",))["nca"].abs() < 1e-7


def test_nca_gradient_reaches_only_the_context_view(batch):
    """Two copies of the student: gradients of L_NCA land on the context-view copy only, and
    those of L_OPD on the no-context copy only."""
    student, b = batch
    import copy

    from nca_interp.losses import token_kl as kl
    from nca_interp.rollout import response_logits

    no_c, with_c = student, copy.deepcopy(student)
    g = response_logits(no_c, b.x_ids, b.x_mask, b.resp, b.resp_mask)
    g_c = response_logits(with_c, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
    kl(g.detach(), g_c, b.resp_mask).backward()
    assert all(p.grad is None for p in no_c.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in with_c.parameters())
    # and loss_terms' nca is exactly that term
    with_c.zero_grad()
    terms = loss_terms(student, student, b, ("opd", "nca"))
    assert torch.allclose(terms["nca"], kl(g.detach(), g_c, b.resp_mask).detach(), atol=1e-6)


def test_combine_beta_zero_is_opd(batch):
    student, b = batch
    terms = loss_terms(student, student, b, ("opd", "nca"))
    assert combine(terms, 0.0) is terms["opd"]
    assert torch.allclose(combine(terms, 0.5), terms["opd"] + 0.5 * terms["nca"])
    with pytest.raises(ValueError, match="unknown loss terms"):
        loss_terms(student, student, b, ("kl",))
