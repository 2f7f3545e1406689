"""The library's messages go through `logging` (each module's logger, named for the module by its
`__spec__` so that `python -m` keeps the name, under the `nca_interp` logger, and `train` for
the training folder), so a notebook or a script importing the package sees only warnings, as
with any library, and sets what else it wants
(`logging.getLogger("nca_interp").setLevel(logging.INFO)` and a handler). A command
(`cli.entry`, every `python -m ...`) shows them as its own lines (`to_console`): INFO on
stdout (what it is doing, what it wrote), WARNING and above on stderr (notes that change how
to read a result), the message alone. Tables a command prints (`show`) and its final lines
stay prints: they are its output, not messages."""

from __future__ import annotations

import logging
import sys

__all__ = ["LOGGERS", "to_console"]

LOGGERS = ("nca_interp", "train")  # the training folder's modules log as train.* from a clone


class _Console(logging.Handler):
    """INFO to the current sys.stdout, WARNING and above to sys.stderr (looked up per message:
    a test's or a notebook's replaced streams receive them), each the message alone."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's contract: a message never raises
            self.handleError(record)


def to_console() -> None:
    """Show the library's INFO and above as a command's lines (`_Console`), once per process;
    the messages no longer also reach the root logger's handlers."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, _Console) for h in logger.handlers):
            logger.addHandler(_Console())
        logger.setLevel(logging.INFO)
        logger.propagate = False
