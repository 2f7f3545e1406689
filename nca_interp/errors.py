"""Errors meant for the user: `python -m` entry points print their message in one line (no
traceback; NCA_INTERP_DEBUG=1 shows it) and exit non-zero. See `nca_interp.cli.entry`.

One type for every user error: `UsageError`. The package raises it (or a subclass that says
which input it was) for anything the caller can fix, from the command line or from Python;
`except UsageError` catches them all. A subclass of ValueError, so code written against
ValueError keeps working. `RunError` is the other kind: a run that cannot go on."""

__all__ = ["UsageError", "RunError", "InputError", "MissingInputError"]


class UsageError(ValueError):
    """A value, flag, file or checkpoint that cannot work; the message names it and what to
    pass instead."""


class RunError(RuntimeError):
    """A run that cannot go on (a failed stage, a missing tool); the message says what to do."""


class InputError(UsageError):
    """A file the command reads that cannot be used (missing, not a regular file, not UTF-8,
    not valid JSON); the message names the file and what to do."""


class MissingInputError(InputError, FileNotFoundError):
    """An input file that does not exist: an InputError (one line for the user) that callers
    which treat a missing file as "not made yet" still catch as FileNotFoundError."""
