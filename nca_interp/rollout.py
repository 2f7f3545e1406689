"""Prompt encoding, batched KV-cache sampling, and teacher-forced response logits.

Prompts are left-padded so every response starts at the same column; positions are counted from
the first real token (`mask.cumsum - 1`), so padding never shifts RoPE phases.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nca_interp.decode import Decoder
from nca_interp.errors import UsageError
from nca_interp.forward import is_hf, positions

__all__ = ["Batch", "decode_responses", "encode", "model_device", "onpolicy_batch", "pad_id",
           "sample", "segment_batch", "stop_ids", "target_batch"]


CHARS_PER_TOKEN = 32  # more than any tokenizer packs into one token of text


class ContextOverflowError(UsageError):
    """A prompt (+ response budget) longer than the model's context window."""


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else \
        tokenizer.eos_token_id


def encode(tokenizer, texts: list[str], limit: int | None = None,
           reserve: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (ids_B_T, mask_B_T). Raises ContextOverflowError instead of truncating when
    a prompt plus `reserve` response tokens exceeds `limit`, and ValueError on characters the
    tokenizer cannot represent (they would silently become <unk>). A text of more than
    CHARS_PER_TOKEN characters per token of `limit` is refused before it is tokenized (that
    alone would take minutes for megabytes of text)."""
    longest_text = max((len(t) for t in texts), default=0)
    if limit and longest_text > CHARS_PER_TOKEN * limit:
        raise ContextOverflowError(
            f"a prompt of {longest_text:,} characters cannot fit the model's context of {limit} "
            f"tokens (that would take more than {CHARS_PER_TOKEN} characters a token); shorten "
            "the prompt or context (or use a model with a longer window)")
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    unk = tokenizer.unk_token_id
    for t, r in zip(texts, rows):
        if unk is not None and unk in r and tokenizer.unk_token not in t:
            bad = sorted({ch for ch in t if tokenizer.convert_tokens_to_ids(ch) == unk})
            raise UsageError(f"characters {bad} are not in the tokenizer's vocabulary (in the "
                             f"text beginning {t[:40]!r}); remove them from the prompt or "
                             "context")
    longest = max(len(r) for r in rows)
    if limit and longest + reserve > limit:
        raise ContextOverflowError(
            f"prompt of {longest} tokens + {reserve} response tokens exceeds the model's context "
            f"of {limit}; shorten the context (or use a model with a longer window) - prompts "
            "are never truncated silently")
    pad = pad_id(tokenizer)
    ids = torch.full((len(rows), longest), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, longest - len(r):] = torch.tensor(r)
            mask[i, longest - len(r):] = 1
    return ids, mask


def stop_ids(tokenizer, model=None) -> list[int]:
    """End-of-response ids: the tokenizer's eos plus the model's generation-config eos ids
    (chat checkpoints often end turns with a token other than the tokenizer's eos)."""
    ids = {tokenizer.eos_token_id}
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(gen if isinstance(gen, list) else [gen])
    return sorted(i for i in ids if i is not None)


def sampling_noise(generator: torch.Generator | None, rows: int, vocab: int, shard: slice,
                   device) -> torch.Tensor:
    """Exp(1) noise for one decoding step, drawn for all `rows` of the *global* batch and then
    sliced to this process's `shard`: every data-parallel rank draws the same numbers, so a
    sharded rollout picks exactly the tokens a single process would."""
    noise = torch.empty(rows, vocab, device=device).exponential_(generator=generator)
    return noise[shard]


@torch.no_grad()
def sample(model, prompt_ids_B_P: torch.Tensor, prompt_mask_B_P: torch.Tensor, max_new: int,
           eos_id: int | list[int], pad_id: int, temperature: float = 1.0,
           generator: torch.Generator | None = None,
           shard: tuple[int, int] | None = None, fast: bool = True
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample responses with a KV cache; temperature 0 is greedy.

    Returns (resp_B_N, resp_mask_B_N): tokens up to and including the first eos are valid
    (mask 1); after it, pad with mask 0. N <= max_new (stops once every row has ended).
    `eos_id` may be a list of stop ids (see `stop_ids`).

    Sampling is the exponential race (Gumbel-max): token = argmax_v logits_v / T - log E_v with
    E_v ~ Exp(1), which draws exactly from softmax(logits / T). `shard = (offset, global_rows)`
    says these rows are rows offset.. of a global batch of `global_rows` (data parallelism);
    the noise is drawn for the global batch (see `sampling_noise`). Llama / Qwen checkpoints
    decode through `nca_interp.decode.Decoder` (preallocated buffers; the same tokens), others
    and `fast=False` through the HF forward with its growing cache.
    """
    B = prompt_ids_B_P.shape[0]
    dev = prompt_ids_B_P.device
    offset, global_rows = shard if shard is not None else (0, B)
    rows = slice(offset, offset + B)
    stops = torch.tensor([eos_id] if isinstance(eos_id, int) else list(eos_id), device=dev)
    if fast and Decoder.supports(model):
        decoder = Decoder(model, prompt_ids_B_P, prompt_mask_B_P,
                          prompt_ids_B_P.shape[1] + max_new)
        step, logits = decoder.step, decoder.logits
    else:
        steps = _hf_steps(model, prompt_ids_B_P, prompt_mask_B_P)
        step, logits = steps.send, next(steps)
    tokens = torch.full((B, max_new), pad_id, dtype=torch.long, device=dev)
    valid = torch.zeros((B, max_new), dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    n = 0
    for n in range(1, max_new + 1):
        if temperature == 0:
            tok = logits.argmax(-1)
        else:
            noise = sampling_noise(generator, global_rows, logits.shape[-1], rows, dev)
            tok = (logits.float() / temperature - noise.log()).argmax(-1)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        valid[:, n - 1] = ~done
        tokens[:, n - 1] = tok
        done = done | torch.isin(tok, stops)
        if n == max_new or bool(done.all()):
            break
        logits = step(tok)
    return tokens[:, :n], valid[:, :n]


def _hf_steps(model, prompt_ids_B_P: torch.Tensor, prompt_mask_B_P: torch.Tensor):
    """The HF forward with its growing cache, as a generator: yields the next-token logits,
    is sent the tokens just chosen."""
    B, dev = prompt_ids_B_P.shape[0], prompt_ids_B_P.device
    mask = prompt_mask_B_P.clone()
    pos = positions(mask)
    keep = {"logits_to_keep": 1} if is_hf(model) else {}
    out = model(input_ids=prompt_ids_B_P, attention_mask=mask, position_ids=pos, use_cache=True,
                **keep)
    next_pos = pos[:, -1:] + 1
    while True:
        tok = yield out.logits[:, -1]
        mask = torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype, device=dev)], dim=1)
        out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos,
                    cache=out.cache, use_cache=True)
        next_pos = next_pos + 1


def decode_responses(tokenizer, resp_B_N: torch.Tensor, resp_mask_B_N: torch.Tensor
                     ) -> tuple[list[str], list[int]]:
    """Response texts (eos and padding stripped) and their lengths in tokens (eos included)."""
    eos = tokenizer.eos_token_id
    texts, lengths = [], []
    for row, m in zip(resp_B_N.tolist(), resp_mask_B_N.tolist()):
        n = sum(m)
        body = row[:n]
        if body and body[-1] == eos:
            body = body[:-1]
        texts.append(tokenizer.decode(body, skip_special_tokens=True))
        lengths.append(n)
    return texts, lengths


def target_batch(tokenizer, targets: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded response tokens (target text + eos) and their mask, for teacher forcing."""
    resp, attn, _ = segment_batch(tokenizer, [[(t, True)] for t in targets])
    return resp, attn


def segment_batch(tokenizer, responses: list[list[tuple[str, bool]]]
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Responses given as (text, trained) segments, each followed by eos: right-padded ids, the
    attention mask (every real token, so a model sees detours and earlier questions) and the
    loss mask (trained segments and the final eos)."""
    rows, trained = [], []
    for segs in responses:
        ids: list[int] = []
        loss: list[bool] = []
        for text, train in segs:
            piece = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
            ids += piece
            loss += [train] * len(piece)
        rows.append(ids + [tokenizer.eos_token_id])
        trained.append(loss + [True])
    N = max(len(r) for r in rows)
    resp = torch.full((len(rows), N), pad_id(tokenizer), dtype=torch.long)
    attn = torch.zeros((len(rows), N), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), N), dtype=torch.long)
    for i, (r, t) in enumerate(zip(rows, trained)):
        resp[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
        loss_mask[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    return resp, attn, loss_mask


def model_device(model) -> torch.device:
    return next(model.parameters()).device


@dataclass
class Batch:
    """One on-policy batch: both prompt views (left-padded) and the sampled responses."""

    x_ids: torch.Tensor  # B P   student prompt x
    x_mask: torch.Tensor
    cx_ids: torch.Tensor  # B Pc  teacher prompt [c, x]
    cx_mask: torch.Tensor
    resp: torch.Tensor  # B N   y ~ g(.|x), eos included, then pad
    resp_mask: torch.Tensor

    def rows(self, start: int, stop: int) -> Batch:
        """Rows start..stop, with columns that are padding in every kept row dropped (prompt
        padding on the left, response padding on the right), for micro-batches."""
        def left(ids, mask):
            keep = int(mask[start:stop].any(0).nonzero()[0]) if mask[start:stop].any() else 0
            return ids[start:stop, keep:], mask[start:stop, keep:]

        n = int(self.resp_mask[start:stop].sum(1).max()) if stop > start else 0
        x_ids, x_mask = left(self.x_ids, self.x_mask)
        cx_ids, cx_mask = left(self.cx_ids, self.cx_mask)
        return Batch(x_ids, x_mask, cx_ids, cx_mask, self.resp[start:stop, :n],
                     self.resp_mask[start:stop, :n])


def onpolicy_batch(student, tokenizer, task, levels: list, context_kind: str, max_new: int,
                   temperature: float = 1.0, generator: torch.Generator | None = None,
                   limit: int | None = None, shard: tuple[int, int] | None = None
                   ) -> tuple[Batch, list[str], list[int]]:
    """Sample y ~ g(.|x) without context and pair it with both prompt views (tensors on the
    student's device). `shard`: these levels are rows offset.. of a global batch (see
    `sample`). Returns the batch, the decoded responses and their lengths (eos included)."""
    dev = model_device(student)
    x_text = [task.prompt(lv) for lv in levels]
    cx_text = [task.prompt(lv, task.context(lv, context_kind)) for lv in levels]
    cx_ids, cx_mask = (t.to(dev) for t in encode(tokenizer, cx_text, limit, reserve=max_new))
    x_ids, x_mask = (t.to(dev) for t in encode(tokenizer, x_text, limit, reserve=max_new))
    was_training = student.training
    student.eval()
    resp, resp_mask = sample(student, x_ids, x_mask, max_new, stop_ids(tokenizer, student),
                             pad_id(tokenizer), temperature, generator, shard)
    student.train(was_training)
    texts, lengths = decode_responses(tokenizer, resp.cpu(), resp_mask.cpu())
    return Batch(x_ids, x_mask, cx_ids, cx_mask, resp, resp_mask), texts, lengths
