import os
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NCA_INTERP_QUIET", "1")  # no progress bars in test output
# `--precision auto` is bf16 on a CPU with native bf16: the suite checks fp32 numerics on every
# machine (tests of the rule set the variable themselves)
os.environ["NCA_INTERP_NATIVE_BF16"] = "0"
# a command's default runs/... output is linked to $NCA_INTERP_RUNS where no runs/ exists: the
# suite's own outputs go to a folder of its own, never into a user's runs
os.environ["NCA_INTERP_RUNS"] = tempfile.mkdtemp(prefix="nca_interp_test_runs_")
torch.set_num_threads(1)
torch.set_flush_denormal(True)


@pytest.fixture(autouse=True, scope="session")
def messages_as_a_command_shows_them():
    """The library's log messages shown as a command shows them (`cli.entry` does this), for
    the tests that call a command's `main` in this process and read what it said;
    tests/unit/test_console.py checks the library's own default, silent below WARNING."""
    from nca_interp.console import to_console

    to_console()


@pytest.fixture(scope="session")
def tok():
    from nca_interp.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


def tiny(tok, arch="qwen3", seed=0, n_layers=2, d_model=32):
    from nca_interp.models import ModelConfig, build_model

    return build_model(ModelConfig(arch, n_layers, d_model, 4, 2, 64, 256), tok, seed)


@pytest.fixture
def tiny_model(tok):
    return tiny(tok)


def command_help(module: str, flag: str = "--help") -> str:
    """What `python -m MODULE FLAG` prints, rendered in this process (no interpreter start, no
    second import of torch): the module's `main` runs with `__main__` standing for MODULE, as
    the usage line reads it (nca_interp.cli.command_name). tests/integration/test_commands.py
    pins that this equals the subprocess's output."""
    import contextlib
    import importlib
    import importlib.util
    import io
    import sys
    import types

    mod = importlib.import_module(module)
    stand_in = types.ModuleType("__main__")
    stand_in.__spec__ = importlib.util.find_spec(module)
    out = io.StringIO()
    real = sys.modules["__main__"]
    sys.modules["__main__"] = stand_in
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
            mod.main([flag])
    finally:
        sys.modules["__main__"] = real
    assert done.value.code in (0, None), f"{module} {flag} exited {done.value.code}"
    return out.getvalue()


# `make test-time` sets NCA_TEST_RECORD: a passing default run records how long it took (the
# README's "make test takes" line is generated from it by `python -m nca_interp.paper.summary
# --write`)
_START: list[float] = []


def pytest_sessionstart(session):
    import time

    _START.extend([time.time(), os.getloadavg()[0]])


def pytest_sessionfinish(session, exitstatus):
    import json
    import subprocess
    import time
    from pathlib import Path

    out = os.environ.get("NCA_TEST_RECORD")
    if not out or exitstatus != 0 or not _START or hasattr(session.config, "workerinput"):
        return  # recorded once, by the run that started the workers (pytest -n)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    Path(out).write_text(json.dumps({
        "seconds": round(time.time() - _START[0], 1), "tests": session.testscollected,
        "cpus": os.cpu_count(), "workers": getattr(session.config.option, "numprocesses",
                                                   None) or 1,
        "load_before": round(_START[1], 1), "commit": commit,
        "date": time.strftime("%Y-%m-%d", time.gmtime())}, indent=1) + "\n")
