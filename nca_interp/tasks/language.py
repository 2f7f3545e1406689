"""The language of a response, by a trained identifier rather than a word list.

py3langid (a maintained port of langid.py: a naive Bayes model over byte n-grams, shipped in
its wheel, no download) ranks the languages a text may be in. Its full set of 97 languages
calls one-sentence French answers Occitan or Catalan (`La capitale de Velmora est Tessik.` ->
oc), so the choice is made among the languages a small English-first chat model writes:
`LANGUAGES`. Words of no language (the task's invented names: `Velmora`, `Tessik`) are removed
first: left in, they tip `La capitale de Velmora est Tessik.` to Italian. A text with fewer
than `MIN_LETTERS` letters left (a bare year) has no language.

`python -m nca_interp.sizing --agreement` measures this scorer against the word list it
replaced on the teacher's own responses, and lists every response where they disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["LANGUAGES", "is_french", "language"]

LANGUAGES = ("en", "fr", "es", "de", "it", "pt", "nl")
MIN_LETTERS = 3


@lru_cache(maxsize=None)
def _identifier(languages: tuple[str, ...]):
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError as e:  # a core dependency: only a broken install lacks it
        raise ImportError("the rule `french` is scored by py3langid: pip install "
                          "py3langid==0.4.0") from e
    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages(list(languages))
    return ident


def without(text: str, words: Iterable[str]) -> str:
    """`text` with every whole-word occurrence of `words` removed (case ignored)."""
    words = sorted({w for w in words if w}, key=len, reverse=True)
    if not words:
        return text
    pattern = r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b"
    return " ".join(re.sub(pattern, " ", text, flags=re.IGNORECASE).split())


def language(text: str, languages: tuple[str, ...] = LANGUAGES,
             ignore: Iterable[str] = ()) -> str | None:
    """The most probable of `languages` for `text` less the words `ignore`, or None when
    fewer than MIN_LETTERS letters are left."""
    text = without(text, ignore)
    if sum(c.isalpha() for c in text) < MIN_LETTERS:
        return None
    label, _ = _identifier(tuple(languages)).classify(text)
    return label


def is_french(text: str, ignore: Iterable[str] = ()) -> bool:
    return language(text, ignore=ignore) == "fr"
