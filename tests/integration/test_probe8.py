"""The eighth probe's cases (#71, /work/notes/probe8.md): a manifest, report, folder name or
run config as the attack. Each failed before its fix."""


import json
import shutil
from pathlib import Path

import pytest

from nca_interp.errors import UsageError
from tests.integration.planted import PIPE_WRITER, forged_refusal, planted_setting

SCORER = PIPE_WRITER + """def empty(item, r): out(b"{}\\n"); return True
def listy(item, r): out(b"[1]\\n"); return True
def bad_json(item, r): out(b"not json\\n"); return True
def twice(item, r): out(b'{"value": false}\\n'); return True
"""


@pytest.mark.parametrize("fn", ["empty", "listy", "bad_json", "twice"])
def test_a_scorer_writing_to_the_reply_pipe_is_one_line_naming_it_and_the_item(tmp_path, fn):
    """T1 / U1: a scorer that wrote `{}` or `[1]` to the protocol's copy of stdout (fd 3 in
    the worker; now its pipe to the supervisor) gave a KeyError or TypeError traceback; a
    non-JSON line named neither scorer nor item; an extra well-formed line put the replies
    out of step."""
    forged_refusal(tmp_path, SCORER, fn)


EVIL = """from pathlib import Path
Path(__file__).with_name("ran").write_text("the attacker's code ran")
def fn(item, response): return True
"""


def evil_scorer(tmp_path: Path) -> str:
    (tmp_path / "evil.py").write_text(EVIL)
    (tmp_path / "data.jsonl").write_text('{"id": "q0", "prompt": "p", "answer": "a"}\n')
    return f"{tmp_path / 'evil.py'}:fn"


def test_size_control_runs_no_scorer_its_manifest_names(tmp_path, capsys):
    """S1: size_control re-ran each OPD run's train.distill command read from the setting's
    manifest; a recorded `--task-options ...,scorer=evil.py:fn` was imported and run. The
    recorded command is data: refused before any work, unless this command names the same
    scorer."""
    from nca_interp.cli import entry
    from nca_interp.paper import size_control

    scorer = evil_scorer(tmp_path)
    runs, figs, argv = planted_setting(
        tmp_path, f"--task jsonl --context context --task-options data={tmp_path / 'data.jsonl'},"
        f"scorer={scorer} --steps 4 --batch 4 --threads 1 --lr 0.001 --out {{out}}")
    assert entry(size_control.main, argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: the train.distill command") and scorer in err[-1], err
    assert "--task-options scorer=" in err[-1] and "manifest.json" in err[-1], err
    assert not (tmp_path / "ran").exists() and not (figs / "myset_size").exists()
    # named on this command line, the same scorer passes the check (the user runs it)
    argv0 = size_control.distill_command(json.loads((figs / "myset" / "manifest.json")
                                                    .read_text()), runs / "myset_opd_s0")
    size_control.refuse_recorded_code(argv0, [f"scorer={scorer}"], "m")
    with pytest.raises(UsageError, match="names the scorer"):
        size_control.refuse_recorded_code(argv0, ["scorer=exact"], "m")


def test_layer_sim_beside_runs_no_scorer_a_reports_config_names(tmp_path, capsys):
    """S2: `layer_sim --beside REPORT` took the report's config.task_options as the
    measurement's options; with no data.task_options record (an older report) nothing checked
    them, and a `scorer=evil.py:fn` added there was imported as if given on the command line.
    Every option read from a report is data: one naming code is refused unless this command
    names it."""
    from nca_interp import layer_sim
    from nca_interp.assets import embedded
    from nca_interp.cli import entry

    scorer = evil_scorer(tmp_path)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {w}", "context": "be nice",
                                        "answer": w}) + "\n" for w in ("hi", "yo", "ho", "ha")))
    opd = tmp_path / "opd"
    shutil.copytree(embedded("sokoban_opd"), opd)
    layer_sim.main([str(opd), "--task", "jsonl", "--context", "context", "--task-options",
                    f"data={data},test_share=0.5", "--threads", "1",
                    "--out", str(tmp_path / "r")])
    report = json.loads((tmp_path / "r.json").read_text())
    report["config"]["task_options"].append(f"scorer={scorer}")
    del report["data"]["task_options"]
    (tmp_path / "older").mkdir()
    (tmp_path / "older" / "r.json").write_text(json.dumps(report))
    capsys.readouterr()
    assert entry(layer_sim.main, ["--beside", str(tmp_path / "older" / "r.json"),
                                  "--threads", "1", "--out", str(tmp_path / "again")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "r.json" in err[-1] and scorer in err[-1], err
    assert "--task-options scorer=" in err[-1], err
    assert not (tmp_path / "ran").exists() and not list(tmp_path.glob("again*"))
    # named on this command line, as the error says, the scorer is the user's to run
    assert entry(layer_sim.main, ["--beside", str(tmp_path / "older" / "r.json"),
                                  "--task-options", f"scorer={scorer}", "--threads", "1",
                                  "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "ran").exists()


def test_a_folder_name_never_becomes_script_nor_loses_its_dot(tmp_path):
    """S3: a checkpoint folder's name went unescaped into plotly's `<div id>` and inline
    script (`a",globalThis.PWNED=1,"` ran in whoever opened the page). Q1: names holding a dot
    were cut at it (`m.v1`, `m.v2` -> one `pd_m.html`, the first silently replaced)."""
    import re

    from nca_interp import param_delta
    from nca_interp.assets import embedded

    evil = 'a",globalThis.PWNED=1,"'
    for name in (evil, "m.v1", "m.v2"):
        shutil.copytree(embedded("sokoban_opd"), tmp_path / "X" / name)
    param_delta.main(["--init", str(embedded("sokoban_base")),
                      *(str(tmp_path / "X" / n) for n in (evil, "m.v1", "m.v2")),
                      "--threads", "1", "--out", str(tmp_path / "o" / "pd")])
    pages = sorted(p.name for p in (tmp_path / "o").glob("*.html"))
    assert "pd_m.v1.html" in pages and "pd_m.v2.html" in pages, pages
    recorded = json.loads((tmp_path / "o" / "pd.json").read_text())["figures"]
    assert any("pd_m.v1.html" in f for f in recorded) and any("pd_m.v2.html" in f
                                                               for f in recorded), recorded
    for page in (tmp_path / "o").glob("*.html"):
        text = page.read_text()
        assert evil not in text, page  # only JSON-escaped (\") inside the figure's data
        ids = re.findall(r'<div id="([^"]*)"', text) + re.findall(
            r'getElementById\("([^"]*)"\)', text)
        assert ids and all(re.fullmatch(r"fig-[A-Za-z0-9_.-]+", i) for i in ids), ids


def test_a_run_configs_backtracking_regex_is_cut_not_hung(tmp_path, monkeypatch):
    """H1: a checkpoint whose run config records the built-in `scorer=regex` with a pattern
    that backtracks without end (and scorer_timeout=3600) hung evaluate: `re` has no time
    limit. The match is cut at REGEX_TIMEOUT and named with the item, in one line."""
    import time

    from nca_interp.assets import embedded
    from nca_interp.checkpoint import write_manifest
    from nca_interp.runs import task_for_checkpoints
    from nca_interp.tasks import jsonl

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "p", "context": "c",
                                        "answer": "a"}) + "\n" for i in range(4)))
    ck = tmp_path / "ckR"
    shutil.copytree(embedded("sokoban_opd"), ck)
    run_config = json.loads((ck / "run_config.json").read_text())
    run_config["task"] = {"name": "jsonl", "data": str(data), "scorer": "regex",
                          "pattern": "(a|aa)+$", "scorer_timeout": 3600}
    (ck / "run_config.json").write_text(json.dumps(run_config))
    write_manifest(ck)
    task = task_for_checkpoints([str(ck)])
    item = next(it for it in jsonl.items(task.config) if it.id == "q0")
    assert task.score(item, "a" * 10).won  # a sane response is scored as before
    monkeypatch.setattr(jsonl, "REGEX_TIMEOUT", 0.5)
    start = time.monotonic()
    with pytest.raises(UsageError) as e:
        task.score(item, "a" * 36 + "b")  # `re`: 0.5 s at 28 a, 1.6-2x more per a
    assert time.monotonic() - start < 60  # regex checks its clock coarsely: ~8 s here
    msg = str(e.value)
    assert "\n" not in msg and "(a|aa)+$" in msg and "'q0'" in msg, msg


def test_a_users_file_at_a_lock_name_is_kept_and_refused(tmp_path, capsys):
    """L1: RunLock opened an existing `.lock` (a common name of other tools' files) or an
    analysis's `.STEM.nca-lock` and truncated it. A lock file holds nothing or our note (a pid
    and a command line); anything else is the user's, refused in one line and kept."""
    from nca_interp import evaluate
    from nca_interp.assets import embedded
    from nca_interp.cli import entry
    from nca_interp.runlock import RunLock

    mine = "user data in .lock\nimportant\n"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").write_text(mine)
    with pytest.raises(UsageError, match="other than this package's lock"):
        RunLock(tmp_path / "run")
    assert (tmp_path / "run" / ".lock").read_text() == mine
    (tmp_path / "L1").mkdir()
    (tmp_path / "L1" / ".r.nca-lock").write_text(mine)
    ck = tmp_path / "ckA"
    shutil.copytree(embedded("sokoban_opd"), ck)
    assert entry(evaluate.main, ["--ckpt", str(ck), "--n-levels", "2", "--threads", "1",
                                 "--out", str(tmp_path / "L1" / "r")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert ".r.nca-lock" in err[-1] and "other than this package's lock" in err[-1], err
    assert (tmp_path / "L1" / ".r.nca-lock").read_text() == mine
    # our own note (a killed holder's) and an empty (released) lock are taken as before
    for note in ("4242\npython -m train.sft --out run\n", ""):
        (tmp_path / "run" / ".lock").write_text(note)
        lock = RunLock(tmp_path / "run")
        lock.release()


def test_reproduce_prunes_only_the_figures_it_drew_unchanged(tmp_path, capsys):
    """L2: prune_figures deleted every .html/.png a figures manifest named as drawn by the
    pipeline, by name only: a user's (or hand-annotated) figure at such a name, or one an
    old or handed manifest names, was lost. Only a file still holding the bytes the manifest
    recorded as the pipeline's is deleted; any other is kept and named."""
    from nca_interp.paper import reproduce

    figs = tmp_path / "figs" / "sokoban"
    figs.mkdir(parents=True)
    manifest = reproduce.Manifest(figs / "manifest.json", reproduce.ReproduceConfig())
    pipeline = "python -m nca_interp.paper.reproduce --task sokoban".split()
    for name in ("old_panel.html", "annotated.png"):
        (figs / name).write_text("drawn by the pipeline")
        manifest.record([str(figs / name)], pipeline, 0.0)
    (figs / "annotated.png").write_text("drawn, then annotated by hand")
    (figs / "my_figure.png").write_text("the user's own")  # named by a handed manifest
    manifest.data["files"][str(figs / "my_figure.png")] = {"command": " ".join(pipeline)}
    gone = reproduce.prune_figures(figs, [str(figs / "harm.html")], manifest)
    assert gone == [str(figs / "old_panel.html")]
    assert sorted(p.name for p in figs.glob("*.png")) == ["annotated.png", "my_figure.png"]
    out = capsys.readouterr().out
    assert "[kept]" in out and "my_figure.png" in out and "annotated.png" in out, out


def test_a_planted_dangling_runs_link_is_refused_not_remade(tmp_path, monkeypatch, capsys):
    """S4: a `runs` link planted in the working folder, dangling, had its target made (with
    parents, anywhere) and written through by `evaluate --out runs/e/r`. Only a link to the
    runs folder itself ($NCA_INTERP_RUNS or the cache's) has its folder made again."""
    from nca_interp import evaluate
    from nca_interp.assets import embedded
    from nca_interp.cli import entry
    from nca_interp.fsio import RUNS_ENV, link_runs_home

    ck = tmp_path / "ckA"
    shutil.copytree(embedded("sokoban_opd"), ck)
    work = tmp_path / "W8"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "home"))
    (work / "runs").symlink_to(tmp_path / "victim" / "viaruns")
    assert entry(evaluate.main, ["--ckpt", str(ck), "--n-levels", "2", "--threads", "1",
                                 "--out", "runs/e/r"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: runs is a link to") and "viaruns" in err[-1], err
    assert not (tmp_path / "victim").exists()
    (work / "runs").unlink()
    (work / "runs").symlink_to(tmp_path / "home")  # the link this package makes: remade
    link_runs_home("runs/e/r")
    assert (tmp_path / "home").is_dir()


def test_patching_two_checkpoints_of_one_folder_name_draws_both(tmp_path):
    """U2: `patching Y1/ckA Y2/ckA` (as `runs/a/final runs/b/final`) computed everything and
    then ended in `Invalid name 'pt_/.../Y2/ckA_positions'`: the second results key is its
    path. Figures take the shortest unique trailing parts (`Y2_ckA`)."""
    from nca_interp import patching
    from nca_interp.assets import embedded

    for d in ("Y1", "Y2"):
        shutil.copytree(embedded("sokoban_opd"), tmp_path / d / "ckA")
    patching.main([str(tmp_path / "Y1" / "ckA"), str(tmp_path / "Y2" / "ckA"), "--kind", "help",
                   "--scope", "groups", "--n-levels", "100", "--max-cases", "4", "--n-random",
                   "4", "--threads", "1", "--out", str(tmp_path / "o" / "pt")])
    pages = sorted(p.name for p in (tmp_path / "o").glob("*.html"))
    assert "pt_ckA_positions.html" in pages and "pt_Y2_ckA_positions.html" in pages, pages
