"""The eighth probe's cases (#71, /work/notes/probe8.md): a manifest, report, folder name or
run config as the attack. Each failed before its fix."""


import pytest

from nca_interp import scorer_worker
from nca_interp.errors import UsageError

SCORER = """import os
def empty(item, r): os.write(3, b"{}\\n"); return True
def listy(item, r): os.write(3, b"[1]\\n"); return True
def bad_json(item, r): os.write(3, b"not json\\n"); return True
def twice(item, r): os.write(3, b'{"value": false}\\n'); return True
"""


@pytest.mark.parametrize("fn", ["empty", "listy", "bad_json", "twice"])
def test_a_scorer_writing_to_the_reply_pipe_is_one_line_naming_it_and_the_item(tmp_path, fn):
    """T1 / U1: a scorer that wrote `{}` or `[1]` to the protocol's copy of stdout (fd 3 in
    the worker) gave a KeyError or TypeError traceback; a non-JSON line named neither scorer
    nor item; an extra well-formed line put the replies out of step."""
    path = tmp_path / "inject.py"
    path.write_text(SCORER)
    w = scorer_worker.ScorerWorker(f"{path}:{fn}", 10)
    try:
        w.start()
        with pytest.raises(UsageError) as e:
            for i in range(3):
                w.score({"id": f"q{i}"}, "x", f"item 'q{i}'")
    finally:
        w.close()
    msg = str(e.value)
    assert "\n" not in msg and f"{path}:{fn}" in msg and "item 'q0'" in msg, msg
    assert "reply channel" in msg, msg
