"""Errors meant for the user: `python -m` entry points print their message in one line (no
traceback; NCA_INTERP_DEBUG=1 shows it) and exit non-zero. See `nca_interp.cli.entry`."""


class UsageError(ValueError):
    """A command-line value that cannot work; the message names the flag and what to pass."""


class RunError(RuntimeError):
    """A run that cannot go on (a failed stage, a missing tool); the message says what to do."""


class InputError(ValueError):
    """A file the command reads that cannot be used (missing, not a regular file, not UTF-8,
    not valid JSON); the message names the file and what to do."""


class MissingInputError(InputError, FileNotFoundError):
    """An input file that does not exist: an InputError (one line for the user) that callers
    which treat a missing file as "not made yet" still catch as FileNotFoundError."""
