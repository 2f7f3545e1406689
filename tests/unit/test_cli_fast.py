"""Commands answer `--help` and argument errors before importing torch (#72, part 5): each runs
as `python -m` runs it, in a process where torch, transformers and TransformerLens cannot be
imported, so an answer proves none of them was needed for it (they took 4-17 s to import)."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from nca_interp import analysis
from nca_interp.cli import entry, parse_config
from nca_interp.configs import LayerSimConfig

ROOT = Path(__file__).resolve().parents[2]

# patching is a package: `python -m` imports its __init__ (light, names served on first use)
# before its __main__
COMMANDS = [s.module for s in analysis.specs()] + \
    ["train.sft", "train.distill", "nca_interp.paper.reproduce"]

# `python -c WITHOUT_TORCH module args...`: the module run as `python -m module args...` would be,
# with the heavy libraries unimportable (an import of one raises ModuleNotFoundError)
WITHOUT_TORCH = (
    "import runpy, sys\n"
    "for name in ('torch', 'transformers', 'transformer_lens'):\n"
    "    sys.modules[name] = None\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n")


def without_torch(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, module, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_builtin_analyses_are_all_checked():
    assert {"nca_interp.evaluate", "nca_interp.layer_sim", "nca_interp.lens",
            "nca_interp.patching"} <= set(COMMANDS)


def test_the_patching_package_imports_no_torch_and_serves_its_names():
    """Importing `nca_interp.patching` (what `python -m` does first) loads none of its torch
    modules; a name asked for is the one its module defines."""
    code = ("import sys\n"
            "for name in ('torch', 'transformers', 'transformer_lens'):\n"
            "    sys.modules[name] = None\n"
            "import nca_interp.patching as p\n"
            "assert not [m for m in sys.modules if m.startswith('nca_interp.patching.')]\n"
            "assert p.PatchingConfig().kind == 'harm' and 'main' in dir(p)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    from nca_interp import patching
    from nca_interp.patching import cases, command, interventions

    assert patching.run is command.run and patching.find_cases is cases.find_cases
    assert patching.sweep is interventions.sweep and set(patching.__all__) <= set(dir(patching))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        patching.nope  # noqa: B018


def test_the_patching_config_offers_the_choices_its_modules_take():
    """`configs.PatchingConfig` spells its choices (the modules that define them import
    torch): they are the modules' own."""
    from nca_interp.configs import PatchingConfig
    from nca_interp.patching import attribution, cases, interventions

    checks = {f.name: f.metadata.get("check") for f in dataclasses.fields(PatchingConfig)}
    assert checks["kind"] == "choice:" + "|".join(cases.KINDS)
    assert checks["ablate"] == "choice:" + "|".join(cases.ABLATE)
    assert checks["scope"] == "choice:" + "|".join(interventions.SCOPES)
    assert checks["method"] == "choice:" + "|".join(attribution.METHODS)


@pytest.mark.parametrize("module", COMMANDS)
def test_help_answers_without_torch(module):
    out = without_torch(module, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: python -m {module} ") and "Traceback" not in out.stderr


@pytest.mark.parametrize("module", COMMANDS)
def test_a_bad_flag_is_refused_without_torch(module):
    """argparse's usage, then its one error line; exit 2."""
    out = without_torch(module, "--no-such-flag")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == \
        f"python -m {module}: error: unrecognized arguments: --no-such-flag"


@pytest.mark.parametrize("module", COMMANDS)
def test_a_bad_value_is_refused_in_one_line_without_torch(module):
    out = without_torch(module, "--threads", "0")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().startswith("error: --threads must be between 1 and ")
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_replaced_sft_flag_is_named_without_torch():
    out = without_torch("train.sft", "--dim-room", "8,8")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "pass --task-options dim_room=8x8 in place of --dim-room 8,8" in out.stderr


def test_main_runs_the_config_parsed_early_as_it_is():
    """`entry(main, parsed=cfg)` hands `main` the config `parse_early` read, and `parse_config`
    returns it unparsed: the command line is read once."""
    cfg = parse_config(LayerSimConfig, ["--n-levels", "7"])
    seen = []
    assert entry(lambda argv: seen.append(parse_config(LayerSimConfig, argv)), ["--x"],
                 parsed=cfg) == 0
    assert seen[0] is cfg


def test_reproduce_records_the_command_line_parse_early_read(monkeypatch):
    """Given the config `parse_early` read, reproduce's manifest still records the command line
    as typed (this process's own, less the flags every command takes)."""
    from nca_interp.paper import reproduce
    from nca_interp.paper.options import ReproduceConfig

    class Planned(Exception):
        pass

    def plan(cfg, argv):
        raise Planned(argv)

    monkeypatch.setattr(reproduce, "plan", plan)
    monkeypatch.setattr(reproduce, "runs_home", lambda runs: None)
    monkeypatch.setenv("NCA_INTERP_QUIET", "0")  # --quiet sets it: restored after the test
    monkeypatch.setattr(sys, "argv", ["reproduce", "--task", "sokoban", "--quick", "--quiet"])
    with pytest.raises(Planned) as typed:
        reproduce.main(parse_config(ReproduceConfig, ["--task", "sokoban", "--quick"]))
    assert typed.value.args[0] == ["--task", "sokoban", "--quick"]
    with pytest.raises(Planned) as given:
        reproduce.main(["--task", "sokoban"])
    assert given.value.args[0] == ["--task", "sokoban"]
