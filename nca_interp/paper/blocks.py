"""Generated blocks in Markdown pages: the one place that finds and rewrites them.

A block is the text between a begin and an end marker (HTML comments, invisible on the page);
the begin marker names the command that writes it, so a reader of the raw file knows where the
text comes from. Generators (claims, summary, sweep, referee) build the body; `replace` puts it
between the markers. A page that should carry a block but lost a marker is an error, never a
silent skip: `optional=True` is for pages that may or may not carry it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nca_interp.errors import UsageError
from nca_interp.fsio import write_text

__all__ = ["Block"]


@dataclass(frozen=True)
class Block:
    begin: str
    end: str

    @classmethod
    def named(cls, name: str, command: str) -> Block:
        return cls(f"<!-- {name}:begin ({command}) -->", f"<!-- {name}:end -->")

    def present(self, text: str) -> bool:
        return self.begin in text and self.end in text

    def replace(self, text: str, body, where: str = "the page", optional: bool = False) -> str:
        """`text` with this block's body replaced by `body` (markers kept; a callable is called
        only once the markers are found, so a long generator never runs for a page that cannot
        take it). A missing marker raises UsageError, or leaves `text` as it is when
        `optional`."""
        if not self.present(text):
            if optional:
                return text
            raise UsageError(f"{where} has no generated block {self.begin} ... {self.end}; "
                             f"restore the markers from git (git checkout -- {where})")
        body = body() if callable(body) else body
        head, rest = text.split(self.begin, 1)
        return f"{head}{self.begin}\n{body}\n{self.end}{rest.split(self.end, 1)[1]}"

    def write(self, path: Path, body: str, optional: bool = False) -> None:
        text = path.read_text()
        new = self.replace(text, body, str(path), optional)
        if new != text:
            write_text(path, new)
