import pytest
import torch

from nca_interp.rollout import (
    ContextOverflowError,
    decode_responses,
    encode,
    response_logits,
    sample,
)


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
