"""No analysis writes into its inputs, no input file hangs or crashes a command, an empty list is
not "the embedded checkpoints", one weight set per folder, and a report says how its prompts
were written. Each case was LOST, SILENT, a TRACEBACK or a HANG in the fault probe of #49."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nca_interp import analysis, evaluate, grad_align, layer_sim, param_delta, patching
from nca_interp.checkpoint import CheckpointError, save_checkpoint, verify_folder
from nca_interp.errors import InputError, UsageError
from nca_interp.fsio import read_json, read_jsonl, read_text
from tests.conftest import tiny
from tests.integration.test_bad_input import digest, refused
from tests.integration.test_faults import TASK

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def base(tok, tmp_path):
    return save_checkpoint(tmp_path / "base", tiny(tok), tok, {"task": TASK})


@pytest.fixture
def student(tok, tmp_path, base):
    """A student whose run config names its initial checkpoint and teacher (base)."""
    return save_checkpoint(tmp_path / "student", tiny(tok, seed=1), tok,
                           {"task": TASK, "student": str(base), "method": "opd", "seed": 0})


# -- --out never lands in an input -----------------------------------------------------------

@pytest.mark.parametrize("main, out", [
    (evaluate.main, "config.json"), (layer_sim.main, "tokenizer"),
    (param_delta.main, "sub/delta"), (grad_align.main, "model.safetensors")])
def test_an_out_inside_a_checkpoint_is_refused_before_any_work(student, capsys, main, out):
    before = digest(student)
    err = refused(main, [str(student), "--out", str(student / out)], capsys)
    assert "never writes into its inputs" in err and str(student) in err
    assert digest(student) == before


def test_an_out_inside_the_recorded_initial_checkpoint_is_refused(student, base, capsys):
    before = digest(base)
    err = refused(layer_sim.main, [str(student), "--out", str(base / "ls")], capsys)
    assert "student" in err and str(base) in err
    assert digest(base) == before


def test_an_out_over_a_task_data_file_is_refused(tmp_path, capsys):
    data = tmp_path / "questions.json"
    data.write_text("{}")
    cfg = evaluate.EvalConfig(ckpt=[], task="opcd", task_options=[f"test={data}"],
                              out=str(tmp_path / "questions"))
    with pytest.raises(UsageError, match="would write over task option"):
        analysis.check_out_clear(cfg, cfg.out)


def test_an_out_beside_the_inputs_is_fine(student, tmp_path):
    analysis.check_out_clear(evaluate.EvalConfig(ckpt=[str(student)]), tmp_path / "rep")


# -- empty inputs are refused by the Python API -------------------------------------------

@pytest.mark.parametrize("mod", [evaluate, layer_sim, grad_align, param_delta, patching])
def test_an_empty_list_is_refused_not_the_embedded_checkpoints(mod):
    with pytest.raises(UsageError, match="no checkpoint given"):
        mod.run([])


def test_the_bare_command_line_still_runs_the_demo(capsys, tmp_path):
    cfg = evaluate.EvalConfig(out=None)
    cfg = analysis.command_defaults(evaluate, cfg)
    assert [Path(p).name for p in cfg.ckpt] == ["sokoban_base"]
    assert "embedded demo checkpoints" in capsys.readouterr().out


# -- the one reader -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["config.json", "nca_checkpoint.json", "run_config.json"])
def test_json_nested_100k_deep_is_one_line(base, tmp_path, capsys, name):
    from nca_interp.checkpoint import write_manifest

    (base / name).write_text("[" * 100_000 + "]" * 100_000)
    if name != "nca_checkpoint.json":
        write_manifest(base)  # a manifest that agrees: the file itself is read
    err = refused(evaluate.main, [str(base), "--out", str(tmp_path / "rep")], capsys)
    assert "nested too deeply" in err and name in err, err


def test_a_five_thousand_digit_number_is_one_line_naming_the_file(tmp_path, capsys):
    """Probe 9's U-1 (probe 10's U-I): Python's "use sys.set_int_max_str_digits()" named no
    file; a report given to --beside (as a manifest or any JSON the package reads) says which."""
    from nca_interp import layer_sim

    f = tmp_path / "big.json"
    f.write_text('{"analysis": "layer_sim", "x": ' + "9" * 5000 + "}")
    err = refused(layer_sim.main, ["--beside", str(f), "--out", str(tmp_path / "o")], capsys)
    assert f"{f}: holds a number too long to read" in err and "set_int_max" not in err, err


def test_an_opcd_line_nested_100k_deep_names_file_and_line(tmp_path):
    from nca_interp.tasks import opcd

    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "a?", "answer": "yes"}\n' + "[" * 100_000 + "\n")
    with pytest.raises(opcd.DataFormatError, match=rf"{f}:2: JSON nested too deeply"):
        opcd.load(str(f), "yesno")


@pytest.mark.parametrize("what", ["config.json", "nca_checkpoint.json"])
def test_non_utf8_files_are_named(base, tmp_path, capsys, what):
    from nca_interp.checkpoint import write_manifest

    (base / what).write_bytes(b'{"a": "\xff\xfe"}')
    if what == "config.json":
        write_manifest(base)
    err = refused(evaluate.main, [str(base), "--out", str(tmp_path / "rep")], capsys)
    assert what in err and ("not UTF-8" in err or "corrupt" in err), err


def test_non_utf8_data_and_system_prompt_files_are_named(tmp_path):
    from nca_interp.tasks import opcd

    data, prompt = tmp_path / "q.jsonl", tmp_path / "s.txt"
    data.write_bytes(b'{"question": "caf\xe9?", "answer": "yes"}\n')
    prompt.write_bytes(b"Be \xff careful")
    with pytest.raises(InputError, match=rf"{data} is not UTF-8 text \(byte \d+, line 1\)"):
        opcd.load(str(data), "yesno")
    with pytest.raises(InputError, match=rf"{prompt} is not UTF-8"):
        opcd.read_system_prompt(str(prompt))


def test_reader_refusals(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="is a folder, not a file"):
        read_json(tmp_path / "d")
    with pytest.raises(InputError, match="does not exist"):
        read_text(tmp_path / "missing")
    (tmp_path / "big").write_bytes(b"x" * 2048)
    with pytest.raises(InputError, match="MiB"):
        read_text(tmp_path / "big", limit=1024)
    (tmp_path / "bad.json").write_text('{"a": 1,}')
    with pytest.raises(InputError, match=r"bad.json: not valid JSON \(line 1"):
        read_json(tmp_path / "bad.json")


def test_a_log_is_read_to_its_last_whole_line_and_data_is_not(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert [v["step"] for _, v in read_jsonl(f, log=True)] == [1, 2]
    with pytest.raises(InputError, match=r"m.jsonl:3"):
        read_jsonl(f)
    f.write_text('{"step": 1}\n{"st\n{"step": 3}\n')  # a bad line in the middle is damage
    with pytest.raises(InputError, match=r"m.jsonl:2"):
        read_jsonl(f, log=True)


def test_opcd_train_equal_to_test_is_named(tmp_path):
    from nca_interp.tasks import opcd

    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "a?", "answer": "yes"}\n')
    cfg = opcd.OPCDConfig(train=str(f), test=str(f), kind="yesno")
    with pytest.raises(opcd.DataFormatError, match="are the same file"):
        opcd.generate_level(0, cfg)


# -- one weight set per folder -------------------------------------------------------------

def test_a_single_file_beside_shards_is_refused_by_every_reader(tok, tmp_path, capsys):
    a = save_checkpoint(tmp_path / "a", tiny(tok, seed=1), tok, {"task": TASK})
    b = tmp_path / "b"
    tiny(tok, seed=2).save_pretrained(b, max_shard_size="20KB")
    assert (b / "model.safetensors.index.json").exists()
    for f in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(a / f, b / f) if f == "model.safetensors" or not (b / f).exists() else None
    (b / "run_config.json").write_text(json.dumps({"task": TASK}))
    with pytest.raises(CheckpointError, match="two weight sets"):
        verify_folder(b)
    for main in (evaluate.main, param_delta.main):
        err = refused(main, [str(b), str(a), "--out", str(tmp_path / "r")], capsys)
        assert "two weight sets" in err


def test_two_unindexed_weight_files_are_refused(base):
    shutil.copy(base / "model.safetensors", base / "other.safetensors")
    with pytest.raises(CheckpointError, match="2 weight files"):
        verify_folder(base)


# -- the prompt format is recorded, a mixed set named ---------------------------------------

def test_every_report_records_its_prompt_format_and_a_mixed_set_is_named(base, tmp_path,
                                                                         capsys):
    assert analysis.prompt_format(base) == "plain"
    chat = tmp_path / "chat"
    chat.mkdir()
    (chat / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    assert analysis.prompt_format(chat) == "chat template"
    analysis.check_prompt_formats([str(base), str(chat)])
    err = capsys.readouterr().err  # a warning: a notebook sees it too
    assert f"{base} has no chat template" in err
    analysis.check_prompt_formats([str(base), str(base)])
    assert capsys.readouterr().err == ""
    assert analysis.run_identity("base", base)["prompt_format"] == "plain"


# -- the one writer ------------------------------------------------------------------------

def test_an_empty_plotly_bundle_is_rewritten(tmp_path):
    import plotly.graph_objects as go

    from nca_interp.plots import write_figure

    (tmp_path / "plotly.min.js").write_text("")  # a kill as plotly's writer made it
    write_figure(go.Figure(go.Scatter(x=[1], y=[1])), tmp_path / "f")
    from plotly.offline import get_plotlyjs

    assert (tmp_path / "plotly.min.js").read_text() == get_plotlyjs()


def test_a_png_export_retries_a_browser_tab_that_was_not_ready_and_nothing_else(
        tmp_path, monkeypatch):
    """kaleido's tab can lose a race on a loaded machine ("kaleido_scopes is not defined"):
    a fresh attempt succeeds. Any other failure (kaleido or chromium missing) is one clear
    error at once, the HTML written."""
    import plotly.graph_objects as go
    import pytest

    from nca_interp.errors import RunError
    from nca_interp.plots import PNG_TRIES, write_figure

    calls = []

    def flaky(self, **kw):
        calls.append(1)
        if len(calls) < PNG_TRIES:
            raise RuntimeError("ReferenceError: kaleido_scopes is not defined")
        return b"png"

    monkeypatch.setattr(go.Figure, "to_image", flaky)
    write_figure(go.Figure(go.Scatter(x=[1], y=[1])), tmp_path / "f", png=True)
    assert (tmp_path / "f.png").read_bytes() == b"png" and len(calls) == PNG_TRIES

    def missing(self, **kw):
        calls.append(1)
        raise RuntimeError("no Chrome found")

    calls.clear()
    monkeypatch.setattr(go.Figure, "to_image", missing)
    with pytest.raises(RunError, match="PNG export failed .*no Chrome found"):
        write_figure(go.Figure(go.Scatter(x=[1], y=[1])), tmp_path / "g", png=True)
    assert len(calls) == 1 and (tmp_path / "g.html").exists()


def test_a_report_records_its_figures_and_names_stale_ones(tmp_path):
    import plotly.graph_objects as go

    report = {"config": {}, "task": "t", "context": None, "runs": {}, "results": {}}
    figs = {"": go.Figure(go.Scatter(x=[1], y=[2])), "b": go.Figure(go.Bar(x=[1], y=[2]))}
    written = analysis.write(report, tmp_path / "rep", figs)
    assert written[0].endswith("rep.json")  # the JSON is written last, named first
    assert analysis.stale_figures(tmp_path / "rep.json") == []
    (tmp_path / "rep_b.html").write_text("an older drawing")
    assert analysis.stale_figures(tmp_path / "rep.json") == ["rep_b.html"]


def test_a_figure_edited_since_its_report_wrote_it_is_never_written_over(tmp_path, capsys):
    """A rerun replaces the report's own figures, but not one a user changed since (LOST in
    the third probe of #71): its sha256 no longer matches the JSON's record."""
    import plotly.graph_objects as go

    report = {"config": {}, "task": "t", "context": None, "runs": {}, "results": {}}
    figs = {"": go.Figure(go.Scatter(x=[1], y=[2])), "b": go.Figure(go.Bar(x=[1], y=[2]))}
    analysis.write(dict(report), tmp_path / "rep", figs)
    assert "replaced the earlier report" not in capsys.readouterr().err
    analysis.write(dict(report), tmp_path / "rep", figs)  # its own, unchanged: replaced,
    assert "note: replaced the earlier report" in capsys.readouterr().err  # and said so
    (tmp_path / "rep_b.html").write_text("my annotated copy")
    before = (tmp_path / "rep.json").read_bytes()
    with pytest.raises(UsageError, match="rep_b.html was changed since this report wrote it"):
        analysis.write(dict(report), tmp_path / "rep", figs)
    assert (tmp_path / "rep_b.html").read_text() == "my annotated copy"
    assert (tmp_path / "rep.json").read_bytes() == before
    with pytest.raises(UsageError, match="changed since"):  # the pipeline's redraw as well
        analysis.redraw(tmp_path / "rep.json", figs)
    (tmp_path / "rep.html").write_text("my edit of the main figure")
    with pytest.raises(UsageError, match="rep.html was changed since"):  # before any work
        analysis.check_outputs(tmp_path / "rep")


def test_a_kill_between_a_figure_and_its_report_leaves_the_figure_its_own(tmp_path,
                                                                          monkeypatch):
    """The new figure lands before the JSON that records its sha256: a kill in between
    leaves a figure the old JSON does not know. The pending record written before the
    figures lets the rerun replace it, on a first run (no JSON yet) as on a later one."""
    import plotly.graph_objects as go

    from nca_interp import cli

    report = {"config": {}, "task": "t", "context": None, "runs": {}, "results": {}}
    old = {"": go.Figure(go.Scatter(x=[1], y=[2]))}
    new = {"": go.Figure(go.Scatter(x=[1], y=[3]))}
    real = cli.write_json

    def killed(path, obj, indent=1):
        if Path(path).name == "rep.json":
            raise KeyboardInterrupt  # after the figures, before the report
        return real(path, obj, indent)

    for first in (True, False):
        folder = tmp_path / str(first)
        folder.mkdir()
        if not first:
            analysis.write(dict(report), folder / "rep", old)
        monkeypatch.setattr(cli, "write_json", killed)
        with pytest.raises(KeyboardInterrupt):
            analysis.write(dict(report), folder / "rep", new)
        monkeypatch.setattr(cli, "write_json", real)
        assert (folder / ".rep.nca-figures").is_file()
        analysis.write(dict(report), folder / "rep", new)  # the rerun: no refusal
        assert analysis.stale_figures(folder / "rep.json") == []
        assert not (folder / ".rep.nca-figures").exists()


def test_a_redraw_records_the_figures_it_changed(tmp_path):
    import plotly.graph_objects as go

    report = {"config": {}, "task": "t", "context": None, "runs": {}, "results": {}}
    analysis.write(dict(report), tmp_path / "rep", {"": go.Figure(go.Scatter(x=[1], y=[2]))})
    before = (tmp_path / "rep.json").read_bytes()
    analysis.redraw(tmp_path / "rep.json", {"": go.Figure(go.Scatter(x=[1], y=[2]))})
    assert (tmp_path / "rep.json").read_bytes() == before  # same drawing: JSON untouched
    analysis.redraw(tmp_path / "rep.json", {"": go.Figure(go.Scatter(x=[1], y=[5]))})
    assert analysis.stale_figures(tmp_path / "rep.json") == []
    analysis.write(dict(report), tmp_path / "rep", {"": go.Figure(go.Scatter(x=[1], y=[2]))})


def test_a_killed_spill_is_removed_by_the_next_and_a_live_ones_kept(tmp_path, monkeypatch):
    import tempfile

    from nca_interp.fsio import STAGE_MARK, spill_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # a pid now gone
    killed = tmp_path / f"nca_interp-spill-grad_align-{dead}-abc"
    live = tmp_path / f"nca_interp-spill-grad_align-{os.getppid()}-abc"
    mine = tmp_path / "grad_align_notes"  # a user's folder of a similar name
    unmarked = tmp_path / f"nca_interp-spill-grad_align-{dead}-def"  # no record: not ours
    for d in (killed, live, mine, unmarked):
        (d / "g.safetensors").parent.mkdir()
        (d / "g.safetensors").write_bytes(b"x")
    for d in (killed, live):
        (d / STAGE_MARK).write_text(d.name)
    with spill_folder("grad_align") as tmp:
        assert tmp.parent == tmp_path and tmp.is_dir()
    assert not killed.exists() and live.exists() and mine.exists() and not tmp.exists()
    assert unmarked.exists()


def test_a_plotly_min_js_that_is_not_plotlys_is_refused_before_work(base, tmp_path, capsys,
                                                                     monkeypatch):
    (tmp_path / "plotly.min.js").write_text("// my own build")
    monkeypatch.setattr(evaluate, "run", lambda cfg: pytest.fail("evaluated anyway"))
    err = refused(evaluate.main, [str(base), "--n-levels", "2", "--out",
                                  str(tmp_path / "rep")], capsys)
    assert "not plotly's bundle" in err
    assert (tmp_path / "plotly.min.js").read_text() == "// my own build"
    assert not (tmp_path / "rep.json").exists()


def test_a_missing_shard_is_named(tok, tmp_path):
    b = tmp_path / "b"
    tiny(tok, seed=2).save_pretrained(b, max_shard_size="20KB")
    tok.save_pretrained(b)
    shard = sorted(b.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=rf"lists 1 shard\(s\) the folder lacks "
                                              rf"\({shard.name}\)"):
        verify_folder(b)


def test_a_stage_whose_marker_cannot_be_written_is_not_left_behind(tmp_path, monkeypatch):
    """A full disk at the marker left an empty, unmarked stage that nothing would ever remove
    (UNCLEAR in #71's fourth probe)."""
    import errno

    from nca_interp import fsio

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsio.os, "write", full)
    with pytest.raises(OSError):
        fsio.new_stage(tmp_path)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
