"""Character-level tokenizer, built with `tokenizers` and saved as a `PreTrainedTokenizerFast`,
and `render_chat`, the one call of a checkpoint's chat template.

Every printable ASCII character, newline and the textarena box-on-target symbol `√` is one token,
so both renderings and every context kind (including free-text rules) round-trip exactly.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from nca_interp.errors import UsageError

__all__ = ["EOS", "build_char_tokenizer", "render_chat"]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
CHARS = sorted(set(string.printable) - set("\t\r\x0b\x0c")) + ["√"]


def build_char_tokenizer(chars: list[str] = CHARS) -> PreTrainedTokenizerFast:
    """The character tokenizer (`chars` in id order after the 4 special tokens)."""
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK] + list(chars))}
    # A BPE model without merges and without a pre-tokenizer splits text into single characters
    # (spaces and newlines included); Fuse joins them back on decode.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, bos_token=BOS,
                                  eos_token=EOS, unk_token=UNK)
    tok.padding_side = "left"
    # TransformerLens 4 reads these when a tokenizer object is handed to a bridge.
    tok.init_kwargs["name_or_path"] = "nca_interp-char"
    tok.init_kwargs["add_bos_token"] = False
    return tok


def render_chat(tokenizer, messages: list[dict], **template_kwargs) -> str:
    """`messages` through `tokenizer`'s chat template, as text with the generation prompt.
    A template that fails (one the jinja sandbox blocks, an undefined name, its own
    `raise_exception`) is a UsageError naming the tokenizer, not a jinja traceback."""
    from jinja2 import TemplateError
    from jinja2.exceptions import SecurityError

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True, **template_kwargs)
    except TemplateError as e:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        why = ("tries something the jinja sandbox forbids" if isinstance(e, SecurityError)
               else "fails")
        said = " ".join(str(e).split())
        raise UsageError(f"the chat template of tokenizer {name} {why} ({type(e).__name__}: "
                         f"{said}); use a checkpoint whose tokenizer has another template, or set "
                         "one that renders these messages") from None
