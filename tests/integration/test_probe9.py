"""The ninth probe's cases (#71, /work/notes/probe9.md): a manifest, run config or scorer as
the attack. Each failed before its fix."""


import json
import shutil

import pytest

from tests.integration.planted import PIPE_WRITER, forged_refusal, planted_setting


@pytest.mark.parametrize("flag,twice", [("--out", "{victim}"), ("--lr", "0.02")])
def test_size_control_refuses_a_recorded_command_giving_a_flag_twice(tmp_path, capsys, flag,
                                                                     twice):
    """S-A / Q-B: size_control replaced only the first --out / --lr of a recorded command;
    argparse took the last, so `--out X --out VICTIM` trained into VICTIM and `--lr a --lr b`
    trained at b while the summary named a x multiplier. Refused before any work."""
    from nca_interp.cli import entry
    from nca_interp.paper import size_control

    victim = tmp_path / "victim"
    runs, figs, argv = planted_setting(
        tmp_path, "--method opd --steps 4 --batch 4 --threads 1 --lr 0.0003 --out {out} "
        f"{flag} {twice.format(victim=victim)}")
    assert entry(size_control.main, argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and f"gives {flag} twice" in err[-1], err
    assert str(figs / "myset" / "manifest.json") in err[-1], err
    assert not victim.exists() and not (figs / "myset_size").exists()
    assert not (runs / "myset_opdsized_s0").exists()


def test_figures_record_digests_refuses_each_bad_input_in_one_line(tmp_path, capsys):
    """T-B: `python -m nca_interp.paper.figures --record-digests` ran main() without
    `cli.entry`: a missing folder, a manifest that is not JSON or has no "files", and a FIFO
    in the folder (shutil.copytree) were tracebacks. Each is one line naming the file; a FIFO,
    which no writer reads, is left out of the redraw's copy."""
    import os
    import subprocess
    import sys

    from nca_interp.cli import entry
    from nca_interp.paper import figures

    nope = tmp_path / "nope"
    proc = subprocess.run([sys.executable, "-m", "nca_interp.paper.figures", "--record-digests",
                           str(nope)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(nope) in lines[0], lines
    for name, text in [("bad", '{"files": '), ("nofiles", '{"x": 1}'),
                       ("strentry", '{"files": {"a.html": "x"}}')]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(text)
        assert entry(figures.main, ["--record-digests", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(tmp_path / name / "manifest.json") in err[0], err
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    (fifo / "manifest.json").write_text('{"files": {}}')
    os.mkfifo(fifo / "notes.fifo")
    assert entry(figures.main, ["--record-digests", str(fifo)]) == 0
    assert "0 recorded" in capsys.readouterr().out


def test_a_manifest_entry_that_is_not_a_mapping_is_one_line_where_it_is_read(tmp_path, capsys):
    """T-C: a manifest whose entry for an output was a string raised AttributeError (a
    traceback) at the stage that read it, possibly hours into the pipeline. Refused when the
    manifest is read, in one line naming it; size_control reads its setting's the same way."""
    from nca_interp.cli import entry
    from nca_interp.errors import InputError
    from nca_interp.paper import reproduce, size_control

    path = tmp_path / "manifest.json"
    for text in ['{"files": {"out.json": "python -m x"}}', '{"files": {"o": {"command": 3}}}',
                 '{"files": []}', "[]"]:
        path.write_text(text)
        with pytest.raises(InputError) as e:
            reproduce.Manifest(path, reproduce.ReproduceConfig())
        assert str(path) in str(e.value) and "\n" not in str(e.value), text
    figs = tmp_path / "figs"
    (figs / "myset").mkdir(parents=True)
    (figs / "myset" / "manifest.json").write_text('{"files": {"runs/myset_opd_s0/x": "y"}}')
    argv = ["--setting", "myset", "--seeds", "0", "--runs", str(tmp_path / "runs"),
            "--figures", str(figs), "--rounds", "1", "--jobs", "1", "--threads", "1"]
    assert entry(size_control.main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(figs / "myset" / "manifest.json") in err[0], err


SCORER = PIPE_WRITER + """def bigint(item, r): out(b'{"n": ' + b"1" * 5000 + b"}\\n"); return True
def deep(item, r): out(b"[" * 200000 + b"]" * 200000 + b"\\n"); return True
"""


@pytest.mark.parametrize("fn", ["bigint", "deep"])
def test_a_reply_line_json_cannot_parse_is_one_line_naming_scorer_and_item(tmp_path, fn):
    """T-A: a line on the reply channel holding an int of >4300 digits (ValueError) or nested
    200,000 deep (RecursionError) ended the supervisor's relay with a traceback, and the
    command then said the scorer had ended its process. The same refusal as any forged line."""

    msg = forged_refusal(tmp_path, SCORER, fn)
    assert "ended its process" not in msg, msg


def test_a_run_configs_regex_with_huge_counted_repeats_is_refused_before_compiling(tmp_path):
    """H-A: `regex.compile` multiplies out counted repeats, with no time or memory limit:
    a run config's `x{4294967294}` exhausted memory before the match's time limit applied.
    A pattern whose counted repeats multiply out past MAX_REPEAT_EXPANSION is refused in one
    line, before `regex` compiles it. (The test's pattern is over the limit but cheap to
    compile, so a broken check fails the test instead of exhausting the machine.)"""
    import time

    from nca_interp.assets import embedded
    from nca_interp.checkpoint import write_manifest
    from nca_interp.errors import UsageError
    from nca_interp.runs import task_for_checkpoints
    from nca_interp.tasks import jsonl

    for sane in [r"\d{1,3}(,\d{3})*", "(a|b{500})+", "[a-z]{5,}", "x{100000}"]:
        assert jsonl.check_regex(sane) == sane
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "q0", "prompt": "p", "context": "c", "answer": "a"})
                    + "\n")
    ck = tmp_path / "ckR"
    shutil.copytree(embedded("sokoban_opd"), ck)
    run_config = json.loads((ck / "run_config.json").read_text())
    for pattern in ["(?:a{1000}){101}", "x{100001}"]:
        run_config["task"] = {"name": "jsonl", "data": str(data), "scorer": "regex",
                              "pattern": pattern}
        (ck / "run_config.json").write_text(json.dumps(run_config))
        write_manifest(ck)
        start = time.monotonic()
        with pytest.raises(UsageError) as e:
            task_for_checkpoints([str(ck)])
        assert time.monotonic() - start < 30
        msg = str(e.value)
        assert "\n" not in msg and repr(pattern) in msg and "100,000" in msg, msg
