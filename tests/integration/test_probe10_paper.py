"""The tenth probe's paper-tool cases (#71, /work/notes/probe10.md): T-E, U-B, U-C, U-H. Each
failed before its fix."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.planted import planted_setting

ROOT = Path(__file__).resolve().parents[2]


def pipeline_folder(tmp_path: Path, damage=None) -> Path:
    """figures/myset under tmp_path: the published Sokoban context return and layer_sim
    reports (the registry draws the first before the second) and a manifest naming the
    layer_sim pages; `damage(report)` edits the layer_sim report's dict."""
    figs = tmp_path / "figures" / "myset"
    figs.mkdir(parents=True)
    shutil.copyfile(ROOT / "figures" / "plotly.min.js", figs.parent / "plotly.min.js")
    shutil.copyfile(ROOT / "figures" / "sokoban" / "context_return.json",
                    figs / "context_return.json")
    report = json.loads((ROOT / "figures" / "sokoban" / "layer_sim.json").read_text())
    if damage is not None:
        damage(report)
    (figs / "layer_sim.json").write_text(json.dumps(report))
    command = {"command": "python -m nca_interp.layer_sim a --out figures/myset/layer_sim"}
    (figs / "manifest.json").write_text(json.dumps({"files": {
        "figures/myset/layer_sim.html": command, "figures/myset/layer_sim_heads.html": command}}))
    return figs


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


DAMAGE = [("no layers", lambda r: r.pop("layers"), "its layers is missing"),
          ("results a list", lambda r: r.update(results=[]), "it has no results entry"),
          ("layers a number", lambda r: r.update(layers=1000000), "its layers is int"),
          ("cos a text", lambda r: r["results"][next(iter(r["results"]))].update(cos="abc"),
           ".cos is str 'abc', not list")]


@pytest.mark.parametrize("what,damage,said", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_report_is_one_line_naming_it_before_any_figure_is_drawn(
        tmp_path, capsys, what, damage, said):
    """T-E: `paper.figures --record-digests` and `paper.report --html` handed a hand-edited
    layer_sim report to its figure: no `layers` was a TypeError, `"results": []` a
    StopIteration (tracebacks), a text cos drew a page. Every report is read whole
    (`analysis.load(..., complete=True)`) before either writes: one line naming the file and
    the field, and the folder unchanged (context_return's pages, drawn first, not written)."""
    from nca_interp.cli import entry
    from nca_interp.paper import figures, report

    figs = pipeline_folder(tmp_path, damage)
    before = digests(figs)
    assert entry(figures.main, ["--record-digests", str(figs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(figs / "layer_sim.json") in err[0] and said in err[0], err
    assert entry(report.main, ["--task", "myset", "--figures", str(figs.parent), "--write",
                               "--html"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(figs / "layer_sim.json") in err[0] and said in err[0], err
    assert digests(figs) == before  # no README, no page, the manifest as it was


def test_paper_report_html_on_a_damaged_report_is_one_line_from_the_command(tmp_path):
    """T-E through `python -m nca_interp.paper.report`, whose main ran without `cli.entry`."""
    figs = pipeline_folder(tmp_path, lambda r: r.pop("layers"))
    proc = subprocess.run([sys.executable, "-m", "nca_interp.paper.report", "--task", "myset",
                           "--figures", "figures", "--write", "--html"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "figures/myset/layer_sim.json is damaged: its layers is " \
        "missing" in lines[0], lines
    assert not (figs / "README.md").exists()


def test_a_whole_report_still_draws(tmp_path, capsys):
    """The check refuses only damage: the undamaged folder redraws and records as before."""
    from nca_interp.cli import entry
    from nca_interp.paper import figures, report

    figs = pipeline_folder(tmp_path)
    assert entry(report.main, ["--task", "myset", "--figures", str(figs.parent), "--html"]) == 0
    assert (figs / "layer_sim.html").is_file() and (figs / "layer_sim_heads.html").is_file()
    assert entry(figures.main, ["--record-digests", str(figs)]) == 0
    assert "2 recorded" in capsys.readouterr().out


def test_a_refused_record_digests_names_the_users_folder_not_its_copy(tmp_path, capsys):
    """U-C: a link planted at a name the redraw writes (`.layer_sim.nca-figures`) is rightly
    refused, but the message named the temporary copy (/tmp/nca_interp-digests-...), gone by
    then: `UnsafePathError` was not among the errors mapped back to the user's folder."""
    from nca_interp.cli import entry
    from nca_interp.paper import figures

    figs = pipeline_folder(tmp_path)
    (figs / ".layer_sim.nca-figures").symlink_to(tmp_path / "victim")
    assert entry(figures.main, ["--record-digests", str(figs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(figs / ".layer_sim.nca-figures") in err[0], err
    assert "nca_interp-digests-" not in err[0], err
    assert not (tmp_path / "victim").exists()


def test_size_control_names_the_manifest_and_command_whose_task_option_is_refused(
        tmp_path, capsys):
    """U-B: a recorded `--task-options=--out` was refused as `task option '--out': expected
    KEY=VALUE ...`, naming neither the manifest nor its command (the user gave no option)."""
    from nca_interp.cli import entry
    from nca_interp.paper import size_control

    runs, figs, argv = planted_setting(
        tmp_path, "--method opd --steps 4 --batch 4 --threads 1 --lr 0.0003 --out {out} "
        "--task-options=--out")
    assert entry(size_control.main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(figs / "myset" / "manifest.json") in err[0], err
    assert "records a train.distill command" in err[0] and "python -m train.distill" in err[0]
    assert "task option '--out'" in err[0], err
    assert not (figs / "myset_size").exists()


@pytest.mark.parametrize("out", ["/", "/.."])
def test_out_at_the_root_says_to_name_a_file_stem(out, capsys):
    """U-H: `--out /` was `error: PosixPath('/') has an empty name`."""
    from nca_interp import evaluate
    from nca_interp.assets import embedded
    from nca_interp.cli import entry

    assert entry(evaluate.main, ["--ckpt", str(embedded("sokoban_opd")), "--n-levels", "2",
                                 "--threads", "1", "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --out {out} is a folder; --out names the report's file stem, e.g. "
                   f"{Path(out) / 'report'}"], err
