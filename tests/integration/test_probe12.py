"""The twelfth probe's findings (#71, /work/notes/probe12.md): L-A (an --out with a suffix
other than .json locked one name and wrote another), T-A (the pipeline outside a clone),
T-B (Ctrl-C while a command imports), T-C (the in-memory cores' items and tokenizer), T-D (a
tokenizer's model_max_length that is not a number)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nca_interp.assets import embedded
from nca_interp.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, **kw)


# -- L-A: one stem for the report, its figures and its lock ----------------------------------

def test_an_out_with_any_suffix_keeps_it_for_the_report_figures_and_lock(tmp_path):
    """`--out e.txt` wrote e.json (another stem's: `--out e`'s) beside e.txt.html, under the
    lock .e.txt.nca-lock, so a second analysis at `--out e` was not refused and one report
    replaced the other without a word; a user's x.json was replaced by `--out x.txt`. Every
    name now comes from the one stem: e.txt.json, e.txt.html, .e.txt.nca-lock."""
    (tmp_path / "x.json").write_text('{"mine": 1}')
    for out in ("e.txt", "x.txt", "m.v2"):
        got = run(["nca_interp.evaluate", str(embedded("sokoban_base")), "--n-levels", "2",
                   "--threads", "1", "--out", out], tmp_path)
        assert got.returncode == 0, got.stderr
        assert (tmp_path / f"{out}.json").is_file() and (tmp_path / f"{out}.html").is_file()
    assert not (tmp_path / "e.json").exists() and not (tmp_path / "m.json").exists()
    assert (tmp_path / "x.json").read_text() == '{"mine": 1}'  # the user's, untouched
    assert json.loads((tmp_path / "e.txt.json").read_text())["analysis"] == "evaluate"


# -- T-A: the pipeline outside a clone -------------------------------------------------------

def test_the_pipeline_outside_a_clone_says_so_in_one_line(tmp_path):
    """It imported the clone's `train` and ended in a ModuleNotFoundError traceback; the
    wheel now leaves it out (tests/integration/test_wheel.py) and an editable install run
    from elsewhere stops in one line, status 2."""
    got = run(["nca_interp.paper.reproduce", "--help"], tmp_path)
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert got.stderr.count("\n") == 1 and "runs from a clone" in got.stderr


# -- T-B: Ctrl-C while a command imports -----------------------------------------------------

def importing_torch(pid: int) -> bool:
    """Whether process `pid` has begun loading torch's library (its imports are under way)."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("args", [
    ["nca_interp.evaluate", "--n-levels", "2"],  # parse_early's guard
    ["train.distill", "--student", "nowhere", "--out", "nowhere_out"],
    ["nca_interp.paper.report", "--task", "sokoban"]])  # a command without parse_early
def test_an_interrupt_while_a_command_imports_is_one_line(tmp_path, args):
    """A Ctrl-C in the seconds a command spends importing torch printed a 30-line
    KeyboardInterrupt traceback from inside an import; it is now one line, status 130."""
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if Path("/proc/self/maps").exists():  # the moment torch's library is being loaded
        deadline = time.monotonic() + 60
        while not importing_torch(proc.pid) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.005)
    else:  # no /proc: well inside the seconds torch takes to import
        time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err[-2000:]
    assert proc.returncode == 130 and err == "interrupted while starting; nothing was done\n"


def test_a_command_without_entry_takes_the_signals_back_once_imported():
    """`quiet_interrupt` says "nothing was done", true only while importing: a command that
    runs without `entry` (which takes the signals over) calls `started` in its `__main__`
    block, so a Ctrl-C during its work is Python's KeyboardInterrupt again."""
    from nca_interp.cli import quiet_interrupt, started

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        quiet_interrupt()
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        started()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
    for f in [*(ROOT / "nca_interp").rglob("*.py"), *(ROOT / "train").glob("*.py")]:
        text = f.read_text()
        if "quiet_interrupt()" in text and "parse_early" not in text and f.name != "cli.py":
            tail = text.rsplit('if __name__ == "__main__":', 1)[1]
            assert "entry(" in tail or "started()" in tail, f


# -- T-C: the in-memory cores' items and tokenizer -------------------------------------------

@pytest.mark.parametrize("levels", [0, -3, 2.5, "8", [], True])
def test_a_core_refuses_items_that_are_no_count_or_list_in_one_line(levels):
    """`layer_sim.compare(..., levels, ...)` with these failed deep inside (max() of an empty
    sequence, a float not iterable, a str without `solution`); now one UsageError naming it,
    before any model is wrapped or run."""
    from nca_interp import layer_sim, lens
    from nca_interp.checkpoint import load_checkpoint

    model, tok = load_checkpoint(embedded("sokoban_base"))
    for call in (lambda: layer_sim.compare({"b": model}, "sokoban", levels, "state", tok=tok),
                 lambda: lens.effect(model, tok, "sokoban", levels, "state")):
        with pytest.raises(UsageError, match="levels is how many items") as e:
            call()
        assert "\n" not in str(e.value)


def test_a_core_refuses_a_tokenizer_that_is_not_one():
    from nca_interp import grad_align, layer_sim, lens, patching, trajectory
    from nca_interp.checkpoint import load_checkpoint

    model, _ = load_checkpoint(embedded("sokoban_base"))
    calls = [lambda: layer_sim.compare({"b": model}, "sokoban", 2, "state", tok="x"),
             lambda: layer_sim.similarity(model, "sokoban", 2, "state", tok="x"),
             lambda: lens.effect(model, "x", "sokoban", 2, "state"),
             lambda: grad_align.align(model, model, "x", "sokoban", 2, "state"),
             lambda: trajectory.over_steps({0: model}, model, "x", "sokoban", "state"),
             lambda: patching.patch(model, "x", "sokoban", "state")]
    for call in calls:
        with pytest.raises(UsageError, match="tok= is the model's tokenizer"):
            call()


# -- T-D: a tokenizer's model_max_length that is not a number --------------------------------

@pytest.mark.parametrize("value", ["NaN", "big", -5, 0])  # null: the default, accepted
def test_a_tokenizer_limit_that_is_no_number_is_named_in_one_line(tmp_path, value):
    """"model_max_length": "NaN" in tokenizer_config.json ended in a 45-line TypeError from
    inside transformers at the first encode; now the checkpoint is refused where it loads,
    naming the file and the key."""
    import shutil

    from nca_interp.checkpoint import write_manifest

    folder = tmp_path / "t1"
    shutil.copytree(embedded("sokoban_base"), folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["model_max_length"] = value
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    write_manifest(folder)  # only the planted defect differs
    got = run(["nca_interp.evaluate", str(folder), "--n-levels", "2", "--threads", "1",
               "--out", str(tmp_path / "e")], tmp_path)
    assert got.returncode == 2 and "Traceback" not in got.stderr
    assert "tokenizer_config.json: model_max_length is" in got.stderr
    assert got.stderr.count("\n") == 1


# -- U-E: a run not finished is said so ------------------------------------------------------

@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A distillation run of 2 steps whose config then asks for 4 (as a run killed after its
    step-2 save stands: the root holds step 2, the same command resumes it)."""
    from nca_interp.checkpoint import write_manifest
    from train import distill

    d = tmp_path_factory.mktemp("unfinished")
    distill.main(["--student", str(embedded("sokoban_base")), "--out", str(d / "ku"), "--batch",
                  "4", "--steps", "2", "--save-every", "2", "--eval-every", "100",
                  "--eval-levels", "4", "--threads", "1", "--context", "plan"])
    cfg = json.loads((d / "ku" / "run_config.json").read_text())
    (d / "ku" / "run_config.json").write_text(json.dumps({**cfg, "steps": 4}, indent=1))
    write_manifest(d / "ku")
    return d / "ku"


def test_an_unfinished_or_running_run_is_named_by_the_analyses_that_read_it(short_run,
                                                                            tmp_path):
    """evaluate and trajectory on a run killed part way (or being trained now) returned 0
    with no word, and the report reads like a finished run's; now a note says which."""
    from nca_interp.runlock import RunLock

    for args in (["nca_interp.evaluate", str(short_run), "--n-levels", "2"],
                 ["nca_interp.trajectory", str(short_run), "--n-levels", "2",
                  "--drift-levels", "2"]):
        got = run([*args, "--threads", "1", "--out", str(tmp_path / args[0])], tmp_path)
        assert got.returncode == 0, got.stderr
        assert "is an unfinished run (step 2 of 4)" in got.stderr, got.stderr
    lock = RunLock(short_run)  # as a train command holds it while it trains
    try:
        got = run(["nca_interp.evaluate", str(short_run), "--n-levels", "2", "--threads", "1",
                   "--out", str(tmp_path / "e2")], tmp_path)
    finally:
        lock.release()
    assert f"is being trained now by pid {os.getpid()}" in got.stderr, got.stderr


# -- probe 13 Q-A: an empty --out ------------------------------------------------------------

@pytest.mark.parametrize("module", ["nca_interp.evaluate", "nca_interp.layer_sim"])
def test_an_empty_out_is_refused_before_the_work(tmp_path, module):
    """`--out ""` (a script's `--out "$OUT"` with OUT unset) ran the whole analysis, printed
    its tables and wrote nothing, with status 0; now one line, status 2, before any work."""
    got = run([module, str(embedded("sokoban_base")), "--n-levels", "2", "--threads", "1",
               "--out", ""], tmp_path)
    assert got.returncode == 2 and got.stderr == \
        "error: --out is empty: name the report's stem (OUT.json, OUT.html), e.g. --out " \
        "runs/mine/report\n"
    assert got.stdout == "" and not list(tmp_path.iterdir())


# -- probe 13 L-A: a user's README.md in a figures folder ------------------------------------

def test_a_page_write_never_replaces_a_readme_it_did_not_generate(tmp_path):
    """`paper.report --task X --write` replaced a figures/X/README.md the user wrote, status 0;
    a page it generated (first line: the generator's mark) is still rewritten."""
    import shutil

    figs = tmp_path / "figures"
    shutil.copytree(ROOT / "figures" / "sokoban", figs / "sokoban")
    shutil.copyfile(ROOT / "figures" / "plotly.min.js", figs / "plotly.min.js")
    page = figs / "sokoban" / "README.md"
    generated = page.read_text()
    page.write_text("# my notes\n")
    got = run(["nca_interp.paper.report", "--task", "sokoban", "--figures", str(figs),
               "--write"], ROOT)
    assert got.returncode == 2 and "is not a page this command wrote" in got.stderr
    assert page.read_text() == "# my notes\n"
    page.write_text(generated.replace("generated tables", "stale"))
    got = run(["nca_interp.paper.report", "--task", "sokoban", "--figures", str(figs),
               "--write"], ROOT)
    assert got.returncode == 0, got.stderr
    assert page.read_text() == generated


def test_a_fifo_at_a_runs_lock_name_is_no_holder_and_never_blocks(tmp_path):
    """`runlock.holder` reads a run's lock without taking it: a FIFO planted at `.lock` would
    block a plain read-only open until a writer came."""
    from nca_interp.runlock import holder

    os.mkfifo(tmp_path / ".lock")
    assert holder(tmp_path) is None
    assert holder(tmp_path / "nowhere") is None
