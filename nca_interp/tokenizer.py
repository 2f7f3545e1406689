"""Character-level tokenizer, built with `tokenizers` and saved as a `PreTrainedTokenizerFast`,
and `render_chat`, the one call of a checkpoint's chat template.

Every printable ASCII character, newline and the textarena box-on-target symbol `√` is one token,
so both renderings and every context kind (including free-text rules) round-trip exactly.
"""

from __future__ import annotations

import contextlib
import signal
import string
import threading
import time

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from nca_interp.errors import UsageError

__all__ = ["EOS", "MAX_RENDER_CHARS", "RENDER_SECONDS", "build_char_tokenizer", "check_tokenizer",
           "render_chat"]

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


RENDER_SECONDS = 10.0  # for one prompt; a real template renders in well under a millisecond
MAX_RENDER_CHARS = 4 << 20  # more than any model's context of text


class _TooSlow(BaseException):
    """Raised by the SIGALRM handler inside a rendering; a BaseException, so no `except
    Exception` on the way swallows it."""


def render_chat(tokenizer, messages: list[dict], **template_kwargs) -> str:
    """`messages` through `tokenizer`'s chat template, as text with the generation prompt.

    A checkpoint's template is data: one that fails (one the jinja sandbox blocks, an undefined
    name, its own `raise_exception`, any other error), takes more than RENDER_SECONDS (bounded
    only when called in the main thread: a timer signal) or renders more than MAX_RENDER_CHARS
    characters is a UsageError naming the tokenizer, not a traceback or a hang."""
    from jinja2.exceptions import SecurityError

    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    advice = ("a checkpoint's template is data; use a checkpoint whose tokenizer has another "
              "template, or set one that renders these messages")
    try:
        with _time_limit(RENDER_SECONDS):
            text = tokenizer.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=True, **template_kwargs)
    except _TooSlow:
        raise UsageError(f"the chat template of tokenizer {name} took more than "
                         f"{RENDER_SECONDS:g} s to render one prompt: {advice}") from None
    except Exception as e:  # noqa: BLE001 - the checkpoint's template: its error, named
        why = ("tries something the jinja sandbox forbids" if isinstance(e, SecurityError)
               else "fails")
        said = " ".join(str(e).split())[:300]
        raise UsageError(f"the chat template of tokenizer {name} {why} ({type(e).__name__}: "
                         f"{said}); {advice}") from None
    if not isinstance(text, str) or len(text) > MAX_RENDER_CHARS:
        size = f"{len(text):,} characters" if isinstance(text, str) else type(text).__name__
        raise UsageError(f"the chat template of tokenizer {name} rendered one prompt as {size}, "
                         f"more than the {MAX_RENDER_CHARS:,} any model's context holds: {advice}")
    return text


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise _TooSlow in the block after `seconds` (a real-time timer; only in the main
    thread, where signals are delivered). The previous SIGALRM handler and timer come back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise _TooSlow

    old_handler = signal.signal(signal.SIGALRM, expired)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay:  # someone else's timer, less the time spent here (at least a tick)
            left = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


def check_tokenizer(tok, where: str = "tok") -> None:
    """Refuse, in one line, a `tok=` that is no tokenizer (a core on models in memory is handed
    the model's tokenizer: a transformers tokenizer, callable and with `decode`)."""
    if not (callable(tok) and callable(getattr(tok, "decode", None))
            and callable(getattr(tok, "encode", None))):
        raise UsageError(f"{where}= is the model's tokenizer (a transformers tokenizer, as "
                         f"load_checkpoint returns it), not {type(tok).__name__}")
