"""Every figure a published manifest names carries the sha256 of its file, which the
pipeline's pruning compares before it deletes a figure that its JSON no longer draws (#71,
probe 8 L2): without one, `reproduce` keeps and names a stale figure instead of deleting it."""

import hashlib
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python -m nca_interp.paper.figures --record-digests figures/<setting>"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_figure_a_manifest_names_has_the_digest_of_its_file():
    wrong = []
    for manifest in sorted((ROOT / "figures").glob("*/manifest.json")):
        for key, entry in json.loads(manifest.read_text())["files"].items():
            path = ROOT / key
            if path.suffix not in (".html", ".png") or path.parent != manifest.parent:
                continue
            if not path.is_file():
                wrong.append(f"{key} (no such file)")
            elif entry.get("sha256") != sha256(path):
                wrong.append(f"{key} ({'no digest' if 'sha256' not in entry else 'changed'})")
    assert not wrong, (f"{len(wrong)} figures lack the digest of their file, e.g. {wrong[:4]}: "
                       f"once they are what their JSON draws (make test-pages), run {COMMAND}")


def test_record_digests_takes_only_what_the_writers_draw_and_prune_then_deletes_it(
        tmp_path, capsys, monkeypatch):
    """A page whose bytes are what its JSON draws now gets its digest, and so does its PNG (as
    committed); a page edited by hand gets none (pruning keeps it), and a digest recorded
    earlier for a PNG is never replaced. The pruning then deletes a recorded figure that the
    JSON no longer draws."""
    from nca_interp.paper import reproduce
    from nca_interp.paper.figures import record_digests

    figs = tmp_path / "figures" / "sokoban_xl"
    shutil.copytree(ROOT / "figures" / "sokoban_xl", figs)
    shutil.copyfile(ROOT / "figures" / "plotly.min.js", tmp_path / "figures" / "plotly.min.js")
    manifest = json.loads((figs / "manifest.json").read_text())
    for entry in manifest["files"].values():
        entry.pop("sha256", None)
    (figs / "context_control.html").write_bytes(b"<html>annotated by hand</html>")
    (figs / "trajectory.png").write_bytes(b"a PNG digested earlier")
    manifest["files"]["figures/sokoban_xl/trajectory.png"] = {
        "command": "python -m nca_interp.paper.reproduce", "sha256": "0" * 64}
    for name in ("context_control.html", "trajectory.html"):
        manifest["files"][f"figures/sokoban_xl/{name}"] = {
            "command": "python -m nca_interp.paper.reproduce"}
    (figs / "manifest.json").write_text(json.dumps(manifest, indent=1))

    found = record_digests(figs)
    files = json.loads((figs / "manifest.json").read_text())["files"]
    assert found["recorded"] and not found["undrawn"] and not found["missing"], found
    for key in found["recorded"]:
        assert files[key]["sha256"] == sha256(figs / Path(key).name), key
    assert "figures/sokoban_xl/context_return.png" in found["recorded"]
    assert found["stale"] == ["figures/sokoban_xl/trajectory.png",
                              "figures/sokoban_xl/context_control.html"], found
    assert "sha256" not in files["figures/sokoban_xl/context_control.html"]
    assert files["figures/sokoban_xl/trajectory.png"]["sha256"] == "0" * 64
    assert record_digests(figs)["recorded"] == []  # re-run: nothing new

    monkeypatch.chdir(tmp_path)  # where the pipeline ran: its keys are relative to it
    rel = Path("figures", "sokoban_xl")
    m = reproduce.Manifest(rel / "manifest.json", reproduce.ReproduceConfig())
    gone = reproduce.prune_figures(rel, [str(rel / "context_return.html")], m)
    assert str(rel / "trajectory.html") in gone and not (figs / "trajectory.html").exists()
    assert (figs / "context_control.html").exists() and (figs / "trajectory.png").exists()
    assert (figs / "context_return.png").exists()  # its page is drawn: kept with it
    out = capsys.readouterr().out
    assert "[kept] figures/sokoban_xl/context_control.html" in out, out
