"""The one plug-in loader behind NCA_INTERP_TASKS / NCA_INTERP_ANALYSES and the
`nca_interp.tasks` / `nca_interp.analyses` entry points."""

import sys
from importlib.metadata import EntryPoint

import pytest

from nca_interp import plugins
from nca_interp.errors import UsageError

GROUP, ENV = "nca_interp.test_plugins", "NCA_INTERP_TEST_PLUGINS"


@pytest.fixture
def two_modules(tmp_path, monkeypatch):
    """Two importable modules that append their name to a shared list when imported."""
    seen: list[str] = []
    monkeypatch.setattr(sys.modules[__name__], "SEEN", seen, raising=False)
    for name in ("plug_a", "plug_b"):
        (tmp_path / f"{name}.py").write_text(
            f"import {__name__} as t\nt.SEEN.append({name!r})\n")
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    return seen


def entry_points_of(**groups):
    def fake(group):
        return [EntryPoint(n, v, group) for n, v in groups.get(group, [])]
    return fake


def test_entry_points_then_the_variable_in_order_each_imported_once(two_modules, monkeypatch):
    monkeypatch.setattr(plugins, "entry_points",
                        entry_points_of(**{GROUP: [("b", "plug_b:register")]}))
    monkeypatch.setenv(ENV, " plug_a , ,plug_b,")
    assert plugins.plugin_modules(GROUP, ENV) == [
        ("entry point b", "plug_b"), (ENV, "plug_a"), (ENV, "plug_b")]
    assert plugins.import_plugins(GROUP, ENV, "task") == ["plug_b", "plug_a", "plug_b"]
    assert two_modules == ["plug_b", "plug_a"]  # a module already imported is not run again
    plugins.import_plugins(GROUP, ENV, "task")
    assert two_modules == ["plug_b", "plug_a"]


def test_nothing_named_imports_nothing(monkeypatch):
    monkeypatch.setattr(plugins, "entry_points", entry_points_of())
    monkeypatch.delenv(ENV, raising=False)
    assert plugins.import_plugins(GROUP, ENV, "task") == []


@pytest.mark.parametrize("kind", ["task", "analysis"])
def test_a_module_that_cannot_be_imported_names_where_it_was_named(monkeypatch, kind):
    monkeypatch.setattr(plugins, "entry_points",
                        entry_points_of(**{GROUP: [("ghost", "no_such_plugin_mod")]}))
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(UsageError, match=f"^entry point ghost names the {kind} module "
                                         "no_such_plugin_mod, which cannot be imported"):
        plugins.import_plugins(GROUP, ENV, kind)
    monkeypatch.setattr(plugins, "entry_points", entry_points_of())
    monkeypatch.setenv(ENV, "also_missing_mod")
    with pytest.raises(UsageError, match=f"^{ENV} names the {kind} module also_missing_mod.*"
                                         "PYTHONPATH"):
        plugins.import_plugins(GROUP, ENV, kind)
