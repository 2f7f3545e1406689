"""Spies the tests share: what a command fed its model, read without changing it."""

from nca_interp import evaluate


def shown(monkeypatch) -> list[str]:
    """Every prompt text evaluate encodes for generation, in order."""
    seen: list[str] = []
    real = evaluate.encode

    def spy(tokenizer, texts, *a, **k):
        seen.extend(texts)
        return real(tokenizer, texts, *a, **k)

    monkeypatch.setattr(evaluate, "encode", spy)
    return seen
