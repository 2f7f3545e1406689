"""The package's layering (train/architecture.py) and its settings file (train/settings.toml)."""

from pathlib import Path

import pytest

from nca_interp.errors import UsageError
from train import architecture, settings

ROOT = Path(__file__).resolve().parents[1]


def test_no_upward_arrow_no_circle_and_every_module_in_a_layer():
    assert architecture.violations(architecture.imports()) == []


def test_the_checker_sees_an_upward_arrow_a_circle_and_an_unnamed_module():
    edges = {"nca_interp.losses": {"train.claims"}, "train.claims": set(),
             "train.report": {"train.summary"}, "train.summary": {"train.report"},
             "elsewhere": set()}
    found = architecture.violations(edges)
    assert any("nca_interp.losses (core) imports train.claims (verdicts)" in v for v in found)
    assert any("circle" in v and "train.report -> train.summary" in v for v in found)
    assert any(v.startswith("elsewhere: no layer") for v in found)
    assert len(found) == 3


def test_the_architecture_page_is_its_generator():
    page = (ROOT / architecture.PAGE).read_text()
    body = architecture.markdown(architecture.imports())
    assert architecture.BLOCK.replace(page, body) == page, \
        "docs/architecture.md is stale; run python -m train.architecture --write"


def test_settings_load_and_every_size_control_folder_is_declared():
    cat = settings.load()
    assert "facts_rule" in cat.settings and "sokoban" in cat.presets
    declared = {n for n, s in cat.settings.items() if s.size_control}
    found = {p.name[:-len("_size")] for p in (ROOT / "figures").glob("*_size")
             if (p / "param_delta.json").exists()}
    assert declared == found
    for name, s in cat.settings.items():  # a beta variant runs NCA alone, at its own beta
        if s.variant == "beta":
            flags = dict(zip(s.flags, s.flags[1:]))
            assert flags["--methods"] == "nca" and float(flags["--beta"]) != 1.0, name


@pytest.mark.parametrize("text, says", [
    ('[presets.p]\nlr = "fast"\n[settings.s]\npreset = "p"\n', "lr = 'fast' should be a float"),
    ('[presets.p]\nlearning_rate = 0.1\n[settings.s]\npreset = "p"\n', "unknown key"),
    ('[presets.p]\nbatch = [8]\n[settings.s]\npreset = "p"\n', "batch = \\[8\\] should be a int"),
    ('[presets.p]\n[settings.s]\npreset = "p"\nseeds = 3\n', "seeds = 3 should be a tuple"),
    ('[presets.p]\n[settings.s]\npreset = "q"\n', "preset 'q' is not a preset"),
    ('[presets.p]\n[settings.s]\nflags = []\n', "preset missing"),
    ('[presets.p]\n[settings.s]\npreset = "p"\nvariant = "beta"\n', "needs both variant_of"),
    ('sweep_rows = ["t"]\n[presets.p]\n[settings.s]\npreset = "p"\n', "'t' (sweep_rows"),
])
def test_a_bad_settings_file_is_refused_in_one_line(text, says):
    with pytest.raises(UsageError, match=says.replace("(", r"\(")):
        settings.parse(text)


def test_hook_names_come_from_names_py():
    """No module but nca_interp/names.py spells a bridge hook name in code (docstrings and
    comments may cite them)."""
    import ast
    import re

    for f in [*(ROOT / "nca_interp").rglob("*.py"), *(ROOT / "train").glob("*.py")]:
        if f.name == "names.py":
            continue
        tree = ast.parse(f.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs:
                assert not re.search(r"(^|\.)hook_(resid|mlp|embed|z|pattern)", node.value), \
                    f"{f.name}: {node.value!r}"


def user_error_problems(root: Path = ROOT) -> list[str]:
    """Places that raise a bare ValueError, and error classes outside the two families
    (`UsageError` for what the caller can fix, `RunError` for a run that cannot go on)."""
    import ast

    from nca_interp.errors import RunError
    found = []
    for path in sorted([*(root / "nca_interp").rglob("*.py"), *(root / "train").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        where = path.relative_to(root)
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                    getattr(node.exc.func, "id", None) == "ValueError":
                found.append(f"{where}:{node.lineno} raises ValueError")
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error") and \
                    node.name not in ("UsageError", "RunError"):
                module = ".".join(where.with_suffix("").parts).removesuffix(".__init__")
                cls = getattr(__import__(module, fromlist=[node.name]), node.name)
                if not issubclass(cls, (UsageError, RunError)):
                    found.append(f"{where}:{node.lineno} {node.name} is neither a UsageError "
                                 "nor a RunError")
    return found


def test_one_user_error_type():
    assert user_error_problems() == []


def test_the_user_error_check_sees_a_bare_value_error(tmp_path):
    (tmp_path / "nca_interp").mkdir()
    (tmp_path / "train").mkdir()
    (tmp_path / "nca_interp" / "bad.py").write_text("def f():\n    raise ValueError('x')\n")
    assert user_error_problems(tmp_path) == ["nca_interp/bad.py:2 raises ValueError"]
