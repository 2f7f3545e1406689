import pytest
import torch

from nca_interp.forward import response_logits
from nca_interp.rollout import ContextOverflowError, decode_responses, encode, sample


def test_left_padding_matches_unpadded(tok, tiny_model):
    texts = ["P__\n>", "a longer prompt\n>"]
    ids, mask = encode(tok, texts)
    resp = torch.tensor([[60, 61, 2], [60, 2, 0]])
    rmask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    batched = response_logits(tiny_model, ids, mask, resp, rmask)
    for i, t in enumerate(texts):
        one_ids, one_mask = encode(tok, [t])
        n = int(rmask[i].sum())
        single = response_logits(tiny_model, one_ids, one_mask, resp[i:i + 1, :n],
                                 rmask[i:i + 1, :n])
        assert torch.allclose(batched[i, :n], single[0], atol=1e-5)


def test_kv_cache_greedy_matches_full_forward(tok, tiny_model):
    ids, mask = encode(tok, ["P__\n>", "xy\n>"])
    resp, rmask = sample(tiny_model, ids, mask, 6, tok.eos_token_id, tok.pad_token_id, 0.0)
    full = response_logits(tiny_model, ids, mask, resp, rmask)
    for b in range(2):
        n = int(rmask[b].sum())
        assert torch.equal(full[b, :n].argmax(-1), resp[b, :n])


def test_sampling_seeded(tok, tiny_model):
    ids, mask = encode(tok, ["P__\n>"] * 4)
    a = sample(tiny_model, ids, mask, 5, 2, 0, 1.0, torch.Generator().manual_seed(3))
    b = sample(tiny_model, ids, mask, 5, 2, 0, 1.0, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0])
    texts, lengths = decode_responses(tok, *a)
    assert len(texts) == 4 and all(0 < n <= 5 for n in lengths)


def test_overflow_and_unknown_characters_raise(tok):
    with pytest.raises(ContextOverflowError, match="never truncated"):
        encode(tok, ["x" * 300], limit=256, reserve=8)
    with pytest.raises(ValueError, match="not in the tokenizer"):
        encode(tok, ["héllo"])


def test_sharded_sampling_matches_the_global_batch(tok, tiny_model):
    """Data-parallel ranks draw noise for the global batch and keep their rows, so two shards
    sample exactly the tokens of one process (what DDP equivalence rests on)."""
    ids, mask = encode(tok, ["P__\n>", "xy\n>", "a\n>", "P_#_\n>"])
    whole, wmask = sample(tiny_model, ids, mask, 6, 2, 0, 1.0, torch.Generator().manual_seed(5))
    for lo in (0, 2):
        part, pmask = sample(tiny_model, ids[lo:lo + 2], mask[lo:lo + 2], 6, 2, 0, 1.0,
                             torch.Generator().manual_seed(5), shard=(lo, 4))
        n = part.shape[1]
        assert torch.equal(part, whole[lo:lo + 2, :n]) and torch.equal(pmask, wmask[lo:lo + 2, :n])
        assert not wmask[lo:lo + 2, n:].any()


def test_exponential_race_samples_the_softmax(tok):
    """argmax(logits/T - log E), E ~ Exp(1), has the softmax(logits/T) distribution."""
    from nca_interp.rollout import sampling_noise

    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([(logits / 0.7 - sampling_noise(gen, 4000, 4, slice(0, 4000), "cpu")
                          .log()).argmax(-1)])
    freq = torch.bincount(draws.flatten(), minlength=4).float() / draws.numel()
    assert torch.allclose(freq, torch.softmax(logits / 0.7, -1), atol=0.025)


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_fast_decoder_tokens_equal_hf_generate_and_the_hf_path(tok, arch):
    """The preallocated-buffer decoder (nca_interp.decode) picks HF generate's greedy tokens,
    and at temperature 1 exactly the tokens of the HF-forward path, shared prefix and all."""
    from tests.conftest import tiny

    model = tiny(tok, arch, seed=3)
    prompts = ["rules: push every box onto a goal\n" + x for x in ["P__\n>", "xy\n>", "a b\n>"]]
    ids, mask = encode(tok, prompts)
    fast, fmask = sample(model, ids, mask, 12, tok.eos_token_id, tok.pad_token_id, 0.0)
    hf = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    hf = hf[:, ids.shape[1]:]
    for b in range(3):
        n = int(fmask[b].sum())
        assert torch.equal(fast[b, :n], hf[b, :n])
    for temp in (0.0, 1.0):
        runs = [sample(model, ids, mask, 12, tok.eos_token_id, tok.pad_token_id, temp,
                       torch.Generator().manual_seed(7), fast=f) for f in (True, False)]
        assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_fast_decoder_is_taken_for_hf_llama_and_qwen_only(tok):
    from nca_interp.decode import Decoder
    from tests.conftest import tiny

    assert all(Decoder.supports(tiny(tok, a)) for a in ("qwen3", "qwen2", "llama"))
    assert not Decoder.supports(torch.nn.Linear(2, 2))
