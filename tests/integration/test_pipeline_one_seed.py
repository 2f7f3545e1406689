"""The documented one-seed pipeline end to end at tiny sizes: the pipeline tier (make
test-pipeline; CI runs it), being the default run's longest test (189 s on 2 idle cores)."""

import json

import pytest

from nca_interp.paper import reproduce

pytestmark = pytest.mark.pipeline


def test_a_one_seed_pipeline_runs_to_its_end(tmp_path, capsys):
    """The documented one-seed pipeline (what --quick runs) at tiny sizes: every analysis,
    param_delta without a seed-to-seed control (it once got control=None and stopped after all
    training), every figure drawn."""
    argv = ["--task", "frozenlake", "--seeds", "0", "--teacher-steps", "4",
            "--distill-steps", "2", "--save-every", "2", "--batch", "4", "--n-levels", "8",
            "--grad-batch", "8", "--threads", "1", "--jobs", "1",
            "--runs", str(tmp_path / "runs"), "--figures", str(tmp_path / "figs")]
    reproduce.main(argv)
    figs = tmp_path / "figs" / "frozenlake"
    for name in ("context_return.json", "layer_sim.json", "grad_align_opd.json",
                 "param_delta.json", "README.md", "manifest.json"):
        assert (figs / name).exists(), name
    delta = json.loads((figs / "param_delta.json").read_text())
    assert delta["config"]["control"] == []
