"""The package's layering (nca_interp/paper/architecture.py) and its settings file
(nca_interp/paper/settings.toml)."""

from pathlib import Path

import pytest

from nca_interp.errors import UsageError
from nca_interp.paper import architecture, settings

ROOT = Path(__file__).resolve().parents[2]


def test_no_upward_arrow_no_circle_and_every_module_in_a_layer():
    assert architecture.violations(architecture.imports()) == []


def test_the_checker_sees_an_upward_arrow_a_circle_and_an_unnamed_module():
    edges = {"nca_interp.losses": {"nca_interp.paper.claims"}, "nca_interp.paper.claims": set(),
             "nca_interp.paper.report": {"nca_interp.paper.summary"},
             "nca_interp.paper.summary": {"nca_interp.paper.report"},
             "elsewhere": set()}
    found = architecture.violations(edges)
    assert any("nca_interp.losses (core) imports nca_interp.paper.claims (verdicts)" in v
               for v in found)
    assert any("circle" in v and "nca_interp.paper.report -> nca_interp.paper.summary" in v
               for v in found)
    assert any(v.startswith("elsewhere: no layer") for v in found)
    assert len(found) == 3


def test_the_architecture_page_is_its_generator():
    page = (ROOT / architecture.PAGE).read_text()
    body = architecture.markdown(architecture.imports())
    assert architecture.BLOCK.replace(page, body) == page, \
        "docs/architecture.md is stale; run python -m nca_interp.paper.architecture --write"


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
    ('[presets.q]\n[presets.p]\nfetched = "m"\nteacher_init = "q"\n[settings.s]\npreset = "p"\n',
     "not both"),
    ('[presets.p]\nteacher_init = "q"\n[settings.s]\npreset = "p"\n', "'q' is not a preset"),
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


def api_problems(root: Path = ROOT) -> list[str]:
    """Modules of nca_interp/ and train/ without `__all__` or naming in it what they do not
    define; and code of the package or bench/ that imports from one of them a name outside its
    `__all__` (a helper reached by an odd route: import it from the module that defines it, or
    add it to that module's `__all__` as part of its interface). A package's `__init__` may
    name in its `__all__` what it imports from its modules (its facade)."""
    import ast

    def tree(p):
        return ast.parse(p.read_text())

    mods = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted([*(root / "nca_interp").rglob("*.py"), *(root / "train").rglob("*.py")])
            if p.name != "__main__.py"}
    exported, found = {}, []
    for m, p in mods.items():
        body = tree(p).body
        top = set()
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                top.add(n.name)
            for t in getattr(n, "targets", [getattr(n, "target", None)]):
                top |= {e.id for e in (t.elts if isinstance(t, ast.Tuple) else [t])
                        if isinstance(e, ast.Name)}
            if p.name == "__init__.py" and isinstance(n, ast.ImportFrom):  # a package's facade
                top |= {a.asname or a.name for a in n.names}
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "LAZY_NAMES":
                top |= {ast.literal_eval(k) for k in n.value.keys}  # served by __getattr__
        alls = [n.value for n in body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "__all__" for t in n.targets)]
        if not alls:
            found.append(f"{m}: no __all__")
            continue
        exported[m] = [ast.literal_eval(e) for e in alls[0].elts]
        found += [f"{m}: __all__ names {x}, which it does not define"
                  for x in exported[m] if x not in top]
    users = [*(root / "nca_interp").rglob("*.py"), *(root / "train").rglob("*.py"),
             *(root / "bench").rglob("*.py")]
    for p in users:
        for n in ast.walk(tree(p)):
            if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module in exported:
                found += [f"{p.relative_to(root)}:{n.lineno} imports {a.name} from "
                          f"{n.module}, outside its __all__" for a in n.names
                          if a.name not in exported[n.module]
                          and f"{n.module}.{a.name}" not in mods]
    return found


def test_every_module_declares_its_interface_and_is_reached_through_it():
    assert api_problems() == []


def test_the_interface_check_sees_a_missing_all_and_an_odd_route(tmp_path):
    for d in ("nca_interp", "train", "bench"):
        (tmp_path / d).mkdir()
    (tmp_path / "nca_interp" / "a.py").write_text("__all__ = ['f', 'g']\n\ndef f():\n    pass\n\n"
                                                  "def helper():\n    pass\n")
    (tmp_path / "nca_interp" / "b.py").write_text("from nca_interp.a import helper\n")
    (tmp_path / "bench" / "c.py").write_text("from nca_interp.a import f\n")
    assert api_problems(tmp_path) == [
        "nca_interp.a: __all__ names g, which it does not define", "nca_interp.b: no __all__",
        "nca_interp/b.py:1 imports helper from nca_interp.a, outside its __all__"]


def test_the_pipeline_folder_file_names_are_spelled_in_layout_only():
    """nca_interp/paper/layout.py decides the file names of a pipeline folder; nothing else in
    the pipeline or in train/ spells them (a renamed file would otherwise leave a reader
    behind)."""
    import re

    names = ("context_return", "context_control", "layer_sim", "param_delta", "harm_drift",
             "patching", "trajectory", "grad_align_opd")
    pattern = re.compile(r"""["'](%s)\.json["']|teacher_\*\.json|teacher_\{""" % "|".join(names))
    found = [f"{p.relative_to(ROOT)}:{i}"
             for p in sorted([*(ROOT / "train").rglob("*.py"),
                              *(ROOT / "nca_interp" / "paper").rglob("*.py")])
             if p.name != "layout.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []

