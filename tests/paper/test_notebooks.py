"""Every notebook runs top to bottom on the embedded checkpoints (or pipeline outputs)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_notebooks_exist():
    names = {p.stem for p in NOTEBOOKS}
    assert {"sokoban_mechanistic", "context_return", "custom_checkpoints", *REAL} <= names


# executing the notebooks is a tier of its own (make test-notebooks; CI runs it): on two idle
# cores the three took about a third of the default run (20 min with them, bench/results/
# test_time.json); the one on the real pretrained model runs with the real tier (make test-real)
REAL = ("real_model",)


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.real) if p.stem in REAL
                                  else pytest.param(p, marks=pytest.mark.notebook)
                                  for p in NOTEBOOKS], ids=lambda p: p.stem)
def test_notebook_executes_and_is_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        f"{path.name} is stored with outputs; clear them (stale results)"
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {})) for o in outputs)
    assert "TqdmWarning" not in text, f"{path.name}: a progress bar warned"
    if path.stem == "custom_checkpoints":  # it shows its figures, not only tables
        assert sum("text/html" in o.get("data", {}) for o in outputs) >= 3
