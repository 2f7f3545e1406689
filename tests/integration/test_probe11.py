"""The eleventh probe's findings (#71, /work/notes/probe11.md): H-C (a character class under a
counted repeat), H-D (a report's sizes drawn without limit), T-F (a tokenizer regex that
panics), Q-J (the template check read every held-out item). L-A is in test_trl.py."""

import json
import shutil
from pathlib import Path

import pytest

from nca_interp.errors import UsageError
from nca_interp.tasks import jsonl

ROOT = Path(__file__).resolve().parents[2]


def damaged_folder(tmp_path: Path, source: str, damage) -> tuple[Path, str]:
    """figures/myset under tmp_path holding the published Sokoban `source` report with
    `damage(entry)` applied to its first results entry, an empty manifest and the shared
    plotly bundle: (the folder, the entry's key)."""
    figs = tmp_path / "figures" / "myset"
    figs.mkdir(parents=True)
    shutil.copyfile(ROOT / "figures" / "plotly.min.js", figs.parent / "plotly.min.js")
    report = json.loads((ROOT / "figures" / "sokoban" / source).read_text())
    key = next(iter(report["results"]))
    damage(report["results"][key])
    (figs / source).write_text(json.dumps(report))
    (figs / "manifest.json").write_text(json.dumps({"files": {}}))
    return figs, key

# -- H-C: a class's members count --------------------------------------------------------------

def test_a_large_class_under_a_counted_repeat_is_refused_before_compiling(monkeypatch):
    """`regex` copies a class's members into every copy of a counted repeat: 4000 members
    under {90000} took 1.9 GB, 8000 a MemoryError, though the bound counted each class as one
    atom. Now a class counts its members (a range one), and a pattern over MAX_PATTERN_CHARS
    is refused outright; both before `regex` compiles anything."""
    import regex

    def never(*a, **k):
        raise AssertionError("regex.compile reached")

    def members(n: int) -> str:
        return "[" + "".join(chr(0x100 + 2 * i) for i in range(n)) + "]{90000}"

    monkeypatch.setattr(regex, "compile", never)
    with pytest.raises(UsageError, match=r"repeats its parts 360,000,000 times") as e:
        jsonl.check_regex(members(4000))  # the probe's pattern, 4,009 characters
    assert "(4,009 characters)" in str(e.value) and len(str(e.value)) < 400
    with pytest.raises(UsageError, match=r"repeats its parts 3,600,000 times"):
        jsonl.check_regex(members(40))
    with pytest.raises(UsageError, match="holds 8,009 characters, more than the 4,096"):
        jsonl.check_regex(members(8000))
    monkeypatch.undo()
    for sane in (r"[a-z]{5,}", r"\w{90000}", r"[A-Z][a-z]+ (?:the|a) [^.]{1,200}\."):
        assert jsonl.check_regex(sane) == sane


# -- H-D: a report's sizes agree with its arrays -----------------------------------------------

@pytest.mark.parametrize("field", ["n_layers", "n_heads"])
def test_a_patching_report_whose_sizes_are_not_its_arrays_is_one_line(tmp_path, capsys, field):
    """`paper.figures --record-digests` and `paper.report --html` sized the patching figures by
    the report's `n_layers` / `n_heads`: 10^9 asked for 21 GB, then the OOM killer. A report
    whose sizes differ from what its arrays hold is refused in one line naming the file and
    the field, before anything is drawn or written; the figure itself refuses them too."""
    import hashlib
    import json

    from nca_interp.cli import entry
    from nca_interp.paper import figures
    from nca_interp.plots import patching_figures
    from nca_interp.reports import ReportError

    figs, key = damaged_folder(tmp_path, "patching.json", lambda e: e.update({field: 10 ** 9}))
    report = json.loads((figs / "patching.json").read_text())
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in figs.iterdir()}
    assert entry(figures.main, ["--record-digests", str(figs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{field} is 1000000000, but its arrays hold" in err[0] \
        and "patching.json" in err[0], err
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in figs.iterdir()} \
        == before
    with pytest.raises(ReportError, match="says .* but its arrays hold"):
        patching_figures(report["results"][key])


# -- T-F: a tokenizer's regex that panics --------------------------------------------------------

def test_a_tokenizer_regex_that_panics_is_one_line(tmp_path):
    """A checkpoint's tokenizer.json normalizer `(a|aa)+$` hits Oniguruma's retry limit on a
    prompt of a's: the tokenizers library panics (pyo3's PanicException, a BaseException),
    which ended the command in a Rust backtrace and a Python traceback. Now one line saying
    what the data did, and no trace of either language."""
    import json
    import os
    import subprocess
    import sys

    from tokenizers import Regex, normalizers

    from nca_interp.checkpoint import save_checkpoint
    from nca_interp.tokenizer import CHARS, build_char_tokenizer
    from tests.conftest import tiny

    tok = build_char_tokenizer(CHARS)
    ck = save_checkpoint(tmp_path / "ck", tiny(tok), tok)  # a model of the plain tokenizer
    tok.backend_tokenizer.normalizer = normalizers.Replace(Regex("(a|aa)+$"), "x")
    tok.save_pretrained(str(ck))  # its tokenizer.json now the probe's
    from nca_interp.checkpoint import write_manifest

    write_manifest(ck)
    data = tmp_path / "aaa.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "a" * 40 + "b",
                                        "context": "c", "answer": "a"}) + "\n"
                            for i in range(8)))
    env = {k: v for k, v in os.environ.items() if k != "NCA_INTERP_DEBUG"}
    env.update(RUST_BACKTRACE="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "nca_interp.evaluate", str(ck), "--task",
                           "jsonl", "--task-options", f"data={data},scorer=exact,split_seed=0",
                           "--n-levels", "2", "--threads", "1", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "stack backtrace" not in done.stderr, \
        done.stderr[-3000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "tokenizer.json" in errors[0] and "backtracks" in errors[0]
    assert not (tmp_path / "r.json").exists()


# -- Q-J: every prompt given c is checked where it is rendered ---------------------------------

def test_a_template_dropping_c_beyond_the_first_items_is_refused_where_it_renders(tok,
                                                                              tmp_path):
    """Q-G's check rendered the first 3 held-out items of facts / sysprompt / opcd: a
    template keeping the system message for those 3 questions alone passed, then dropped c
    for the rest (5 of 10 evaluated items one prompt both ways, exit 0; distill, the lens and
    the TRL callback too). Every prompt given c is now compared with its no-c twin where it
    is rendered (`ChatFormat`), so evaluate refuses in one line and writes no report."""
    import copy

    from nca_interp import evaluate
    from nca_interp.checkpoint import save_checkpoint
    from nca_interp.tasks import make_task
    from tests.conftest import tiny

    task = make_task("facts")
    first = [task.render(lv) for lv in task.levels("test", 3)]
    keep = " or ".join(f"{q!r} in u" for q in first)
    template = ("{% set u = messages[-1]['content'] %}{% set keep = " + keep + " %}"
                "{% for m in messages %}{% if m['role'] == 'user' or keep %}{{ m['content'] }}"
                "\n{% endif %}{% endfor %}")
    crafted = copy.deepcopy(tok)
    crafted.chat_template = template
    seen = task.for_tokenizer(crafted)  # the first three keep c: the upfront check passes
    fourth = task.levels("test", 4)[3]
    with pytest.raises(UsageError, match="drops the context .* for the item") as e:
        seen.prompt(fourth, seen.context(fourth, "facts"))
    assert "\n" not in str(e.value)
    ckpt = save_checkpoint(tmp_path / "crafted", tiny(tok), crafted)
    with pytest.raises(UsageError, match="drops the context"):
        evaluate.execute(evaluate.EvalConfig(ckpt=[str(ckpt)], task="facts", context="facts",
                                             n_levels=10, out=str(tmp_path / "rep")))
    assert not list(tmp_path.glob("rep*"))


# -- U-K: a dangling link on the way to --out -------------------------------------------------

def test_a_dangling_link_above_out_is_named_before_any_work(tmp_path, capsys):
    """`--out D/sub/r` with `D/sub` a link to a folder that does not exist said only
    "[Errno 17] File exists: 'D/sub'"; now one line naming the link and where it points."""
    from nca_interp import evaluate
    from nca_interp.cli import entry

    (tmp_path / "D").mkdir()
    (tmp_path / "D" / "sub").symlink_to(tmp_path / "gone")
    assert entry(evaluate.main, ["--n-levels", "2", "--threads", "1",
                                 "--out", str(tmp_path / "D" / "sub" / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{tmp_path / 'D' / 'sub'} is a link to {tmp_path / 'gone'}, which does not exist" \
        in err and "Errno" not in err, err
    assert not (tmp_path / "gone").exists()


# -- U-L: an interval that is not one -------------------------------------------------------------

def test_a_short_interval_in_a_report_is_one_line_naming_it(tmp_path, capsys):
    """A context return report whose `ci95.delta_c` held one number ended `--record-digests`
    in "not enough values to unpack (expected 2, got 1)", naming no file or field."""

    from nca_interp.cli import entry
    from nca_interp.paper import figures

    figs, key = damaged_folder(tmp_path, "context_return.json",
                               lambda e: e["ci95"].update(delta_c=[0.1]))
    assert entry(figures.main, ["--record-digests", str(figs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"results[{key!r}].ci95.delta_c is '[0.1]', not an interval" \
        in err[0] and "context_return.json" in err[0], err


# -- U-R: values no analysis writes ------------------------------------------------------------

@pytest.mark.parametrize("source, field, value", [
    ("layer_sim.json", "cos", [5.0]), ("layer_sim.json", "cos", ["x"]),
    ("context_return.json", "correct_c", 7.5), ("context_return.json", "n", -5)])
def test_a_value_no_analysis_writes_is_refused_before_drawing(tmp_path, capsys, source, field,
                                                              value):
    """`--record-digests` and `report --html` drew a layer_sim report with cos 5.0 or "x" at
    every layer, and an evaluate report with correct_c 7.5 or n -5, into pages with rc 0 (the
    range checks were `--beside`'s alone). Refused at the door, one line naming the field."""

    from nca_interp.cli import entry
    from nca_interp.paper import figures

    def damage(e):
        e[field] = value * len(e[field]) if isinstance(value, list) else value

    figs, key = damaged_folder(tmp_path, source, damage)
    assert entry(figures.main, ["--record-digests", str(figs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"results[{key!r}].{field}" in err[0] and source in err[0], err
    assert not list(figs.glob("*.html"))
