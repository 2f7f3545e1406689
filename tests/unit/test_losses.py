import pytest
import torch

from nca_interp.losses import Estimator, combine, estimated_kl, loss_terms, position_kl
from nca_interp.rollout import onpolicy_batch
from nca_interp.tasks import make_task
from tests.conftest import tiny


def token_kl(p, q, mask, estimator=None):
    """The token-mean KL(p || q) through the one KL path (differentiable)."""
    tokens = torch.zeros(mask.shape, dtype=torch.long)
    return estimated_kl(estimator or Estimator(), p, q, tokens, mask)[0]


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
    for tail in ("renorm", "none", "bucket"):
        assert torch.allclose(token_kl(p, q, mask, Estimator("topk", 7, tail=tail)),
                              token_kl(p, q, mask), atol=1e-6)
    assert token_kl(p, q, mask, Estimator("topk", 2)) >= 0
    assert torch.allclose(position_kl(p, q), torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=p), torch.distributions.Categorical(logits=q)),
        atol=1e-5)
    with pytest.raises(ValueError, match="sampled one needs the response tokens"):
        position_kl(p, q, Estimator("sampled"))


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

    from nca_interp.forward import response_logits
    kl = token_kl

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


class TwoViews(torch.nn.Module):
    """A stand-in model whose response logits are free parameters, one table per view: `no_c`
    for prompts without the context (they start with token 0), `with_c` for [c, x] (token 1
    first). Peaked (scale 6) so that KL directions differ by a wide margin."""

    def __init__(self, n_resp: int, vocab: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.no_c = torch.nn.Parameter(6 * torch.randn(n_resp, vocab, generator=g))
        self.with_c = torch.nn.Parameter(6 * torch.randn(n_resp, vocab, generator=g))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        B, T = input_ids.shape
        n = self.no_c.shape[0]
        table = torch.where((input_ids[:, :1] == 1)[:, :, None], self.with_c, self.no_c)
        logits = torch.zeros(B, T, self.no_c.shape[1]).index_put(
            (torch.arange(B)[:, None], torch.arange(T - n - 1, T - 1)[None]), table)
        return type("Out", (), {"logits": logits})()


@pytest.fixture
def two_views():
    from nca_interp.rollout import Batch

    n, vocab, B = 3, 7, 2
    x = torch.zeros(B, 4, dtype=torch.long)
    cx = torch.cat([torch.ones(B, 2, dtype=torch.long), x], 1)
    resp = torch.full((B, n), 2)
    batch = Batch(x, torch.ones_like(x), cx, torch.ones_like(cx), resp, torch.ones_like(resp))
    return TwoViews(n, vocab, 0), TwoViews(n, vocab, 1), batch


def kl_ref(p_logits, q_logits):
    """mean over positions of KL(p || q) by torch.distributions (an independent reference)."""
    return torch.distributions.kl_divergence(torch.distributions.Categorical(logits=p_logits),
                                             torch.distributions.Categorical(logits=q_logits)
                                             ).mean()


def test_loss_terms_directions_match_torch_distributions(two_views):
    student, teacher, batch = two_views
    terms = loss_terms(student, teacher, batch, ("opd", "nca", "ctx"))
    g, g_c, f_c = student.no_c.detach(), student.with_c.detach(), teacher.with_c.detach()
    expected = {"opd": kl_ref(g, f_c), "nca": kl_ref(g, g_c), "ctx": kl_ref(g_c, f_c)}
    reverse = {"opd": kl_ref(f_c, g), "nca": kl_ref(g_c, g), "ctx": kl_ref(f_c, g_c)}
    for name, value in terms.items():
        assert torch.allclose(value, expected[name], rtol=1e-5), name
        assert (reverse[name] - expected[name]).abs() > 0.5, name  # directions distinguishable


def test_nca_gradient_never_reaches_the_no_context_view(two_views):
    student, teacher, batch = two_views
    loss_terms(student, teacher, batch, ("nca",))["nca"].backward()
    assert student.no_c.grad is None or student.no_c.grad.abs().max() == 0
    assert student.with_c.grad.abs().max() > 1e-3
    student.zero_grad(set_to_none=True)
    loss_terms(student, teacher, batch, ("opd",))["opd"].backward()
    assert student.with_c.grad is None or student.with_c.grad.abs().max() == 0
    assert student.no_c.grad.abs().max() > 1e-3


def test_temperature_tempers_every_view(two_views):
    student, teacher, batch = two_views
    T = 2.5
    terms = loss_terms(student, teacher, batch, ("opd", "nca"), temperature=T)
    g, g_c, f_c = (t.detach() / T for t in (student.no_c, student.with_c, teacher.with_c))
    assert torch.allclose(terms["opd"], kl_ref(g, f_c), rtol=1e-5)
    assert torch.allclose(terms["nca"], kl_ref(g, g_c), rtol=1e-5)
    assert not torch.allclose(terms["opd"], loss_terms(student, teacher, batch)["opd"])
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            loss_terms(student, teacher, batch, temperature=bad)


def test_sampler_draws_from_the_tempered_policy():
    """The exponential race samples softmax(z / T): frequencies over 20k draws."""
    from nca_interp.rollout import sampling_noise

    z = torch.tensor([[2.0, 0.0, -1.0, 1.0]])
    T = 2.0
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([(z / T - sampling_noise(gen, 1, 4, slice(0, 1), "cpu").log()).argmax(-1)
                         for _ in range(20000)]).flatten()
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    assert torch.allclose(freq, torch.softmax(z / T, -1)[0], atol=0.015)


def _expected_grad(est, p_logits, q_logits, wrt):
    """E_{y ~ p}[grad of the estimator's surrogate at y], by enumerating the vocabulary (one
    position): what an estimator's gradient is unbiased *for*."""
    from nca_interp.losses import Estimator  # noqa: F401

    V = p_logits.shape[-1]
    probs = torch.softmax(p_logits.detach(), -1)[0, 0]
    total = torch.zeros(V, dtype=torch.float64)
    for y in range(V):
        x = (p_logits if wrt == "p" else q_logits).detach().clone().requires_grad_(True)
        args = (x, q_logits.detach()) if wrt == "p" else (p_logits.detach(), x)
        loss, _ = est.per_position(*args, torch.tensor([[y]]))
        loss.sum().backward()
        total += probs[y].double() * x.grad[0, 0].double()
    return total


def _kl_grad(p_logits, q_logits, wrt, forward=False):
    x = (p_logits if wrt == "p" else q_logits).detach().clone().requires_grad_(True)
    lp = torch.log_softmax(x if wrt == "p" else p_logits.detach(), -1)
    lq = torch.log_softmax(q_logits.detach() if wrt == "p" else x, -1)
    kl = (lq.exp() * (lq - lp)).sum() if forward else (lp.exp() * (lp - lq)).sum()
    kl.backward()
    return x.grad[0, 0].double()


def test_sampled_estimators_are_unbiased_for_the_gradient_they_claim():
    """Exact expectations over y ~ p (small vocabulary): k1's surrogate gives grad KL(p || q)
    through p (OPD: the score-function term) and through q (NCA's anchor); k3 gives it through
    q but, through p, the gradient of the *forward* KL(q || p)."""
    from nca_interp.losses import Estimator

    gen = torch.Generator().manual_seed(0)
    p, q = torch.randn(1, 1, 7, generator=gen), torch.randn(1, 1, 7, generator=gen)
    k1, k3 = Estimator("sampled", form="k1"), Estimator("sampled", form="k3")
    assert torch.allclose(_expected_grad(k1, p, q, "p"), _kl_grad(p, q, "p"), atol=1e-5)
    assert torch.allclose(_expected_grad(k1, p, q, "q"), _kl_grad(p, q, "q"), atol=1e-5)
    assert torch.allclose(_expected_grad(k3, p, q, "q"), _kl_grad(p, q, "q"), atol=1e-5)
    assert torch.allclose(_expected_grad(k3, p, q, "p"), _kl_grad(p, q, "p", forward=True),
                          atol=1e-5)
    assert not torch.allclose(_expected_grad(k3, p, q, "p"), _kl_grad(p, q, "p"), atol=1e-2)
    # the values: E_y[k1] = E_y[k3] = KL(p || q)
    probs = torch.softmax(p, -1)[0, 0]
    full = Estimator().per_position(p, q, torch.tensor([[0]]))[1]
    for est in (k1, k3):
        vals = torch.stack([est.per_position(p, q, torch.tensor([[y]]))[1][0, 0]
                            for y in range(7)])
        assert float((probs * vals).sum()) == pytest.approx(float(full), abs=1e-5)


def test_top_k_estimators_reach_the_full_kl():
    from nca_interp.losses import Estimator

    gen = torch.Generator().manual_seed(1)
    p, q = torch.randn(2, 3, 9, generator=gen), torch.randn(2, 3, 9, generator=gen)
    y = torch.zeros(2, 3, dtype=torch.long)
    full = Estimator().per_position(p, q, y)[1]
    for support in ("p", "q"):
        every = Estimator("topk", k=9, support=support).per_position(p, q, y)[1]
        assert torch.allclose(every, full, atol=1e-6)
        # the remaining mass as one category: exact with one token left out
        bucket = Estimator("topk", k=8, support=support, tail="bucket").per_position(p, q, y)[1]
        assert torch.allclose(bucket, full, atol=1e-5)
        partial = Estimator("topk", k=3, support=support, tail="none").per_position(p, q, y)[1]
        assert not torch.allclose(partial, full, atol=1e-2)
    with pytest.raises(ValueError, match="support must be one of p, q"):
        Estimator("topk", support="student")
    assert Estimator("topk", k=256, support="q").teacher_floats_per_token(49152) == 512


def test_estimator_path_full_equals_the_plain_path_and_keeps_the_anchor(batch, tok):
    """loss_terms with Estimator('full') gives the plain terms, values and gradients; with the
    sampled estimator the NCA term still sends no gradient to the no-context view."""
    import copy

    from nca_interp.losses import Estimator

    student, b = batch
    teacher = tiny(tok, seed=5)
    grads = []
    for kw in ({}, {"estimator": Estimator()}):
        student.zero_grad(set_to_none=True)
        t = loss_terms(student, teacher, b, ("opd", "nca"), **kw)
        combine(t, 1.0).backward()
        grads.append(torch.cat([p.grad.flatten() for p in student.parameters()]))
        assert t["opd"] > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    student.zero_grad(set_to_none=True)
    # the anchor: through a stop-gradient the sampled NCA term reaches the context view only
    from nca_interp.forward import response_logits
    from nca_interp.losses import estimated_kl

    no_c, with_c = student, copy.deepcopy(student)
    g = response_logits(no_c, b.x_ids, b.x_mask, b.resp, b.resp_mask)
    g_c = response_logits(with_c, b.cx_ids, b.cx_mask, b.resp, b.resp_mask)
    for form in ("k1", "k3"):
        estimated_kl(Estimator("sampled", form=form), g.detach(), g_c, b.resp,
                     b.resp_mask)[0].backward(retain_graph=True)
    assert all(p.grad is None for p in no_c.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in with_c.parameters())
