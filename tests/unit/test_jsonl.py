"""Your own data (`--task jsonl`): prompts used as written, c placed where asked, scorers by
name or your own function, a budget from the data, bad lines named by file and line, and
`evaluate` without a scorer reporting what it can measure."""

import json
from pathlib import Path

import pytest

from nca_interp import evaluate
from nca_interp.checkpoint import save_checkpoint
from nca_interp.errors import InputError, UsageError
from nca_interp.tasks import jsonl, task_from_record
from tests.conftest import tiny


def write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def rows(n=12, answer=True):
    return [{"prompt": f"what is {i} plus one", "context": f"you always answer {i + 1}",
             **({"answer": str(i + 1)} if answer else {}), "id": f"q{i}"} for i in range(n)]


def task(tmp_path, *options, data=None):
    data = data or write(tmp_path / "d.jsonl", rows())
    return task_from_record(None, "jsonl", None, [f"data={data}", *options])


# -- the data --------------------------------------------------------------------------------

def test_items_keep_their_prompt_context_answer_and_a_seeded_split(tmp_path):
    t = task(tmp_path, "test_share=0.25")
    test = t.levels("test", 100)
    assert len(test) == 3 and all(it.split == "test" for it in test)
    again = task(tmp_path, "test_share=0.25")
    assert [it.id for it in again.levels("test", 100)] == [it.id for it in test]
    other = task(tmp_path, "test_share=0.25", "split_seed=1")
    assert [it.id for it in other.levels("test", 100)] != [it.id for it in test]
    lv = test[0]
    assert t.prompt(lv) == lv.prompt  # exactly as written: nothing appended
    assert t.prompt(lv, t.context(lv, "context")) == f"{lv.context}\n{lv.prompt}"
    train = {it.id for it in t.sample_levels("s", 50, set())}
    assert not train & {it.id for it in test}


def test_an_explicit_split_is_kept(tmp_path):
    data = rows(4)
    data[0]["split"], data[1]["split"] = "test", "train"
    data[2]["split"] = data[3]["split"] = "train"
    t = task(tmp_path, data=write(tmp_path / "d.jsonl", data))
    assert [it.id for it in t.levels("test", 10)] == ["q0"]


def test_a_shared_context_file_and_the_wrong_c_control(tmp_path):
    persona = tmp_path / "persona.txt"
    persona.write_text("You are Captain Quill; begin every answer with Ahoy!\n")
    data = write(tmp_path / "d.jsonl", [{"prompt": f"tell me about {w}"} for w in
                                        ("tides", "maps", "rum", "stars")])
    t = task(tmp_path, f"context_file={persona}", "test_share=0.5", data=data)
    lv = t.levels("test", 10)
    assert t.context(lv[0], "context") == persona.read_text().strip()
    wrong = t.control_context(lv, 0, "context")
    assert wrong != t.context(lv[0], "context") and sorted(wrong.split()) == sorted(
        t.context(lv[0], "context").split())
    own = task(tmp_path)  # per-item contexts: another item's c
    levels = own.levels("test", 10)
    c0 = own.control_context(levels, 0, "context")
    assert c0 != levels[0].context and c0 in {it.context for it in jsonl.items(own.config)}


@pytest.mark.parametrize("line, why", [
    ('{"prompt": "a", "context": "c"', "not valid JSON"),
    ('["a"]', "not a JSON object"),
    ('{"context": "c"}', '"prompt" is missing'),
    ('{"prompt": "a"}', '"context" is missing'),
    ('{"prompt": [{"role": "assistant", "content": "x"}], "context": "c"}', "end with a user"),
    ('{"prompt": "a", "context": "c", "split": "dev"}', "train or test"),
])
def test_a_malformed_line_names_file_and_line_and_nothing_is_dropped(tmp_path, line, why):
    data = write(tmp_path / "bad.jsonl", [rows(2)[0], line, rows(3)[2]])
    with pytest.raises(InputError, match=rf"bad.jsonl:2: .*{why}"):
        task(tmp_path, data=data).levels("test", 5)


def test_a_repeated_id_and_a_missing_file_are_named(tmp_path):
    data = rows(3)
    data[2]["id"] = "q0"
    with pytest.raises(InputError, match=r"d.jsonl:3: id 'q0' repeats the one at .*d.jsonl:1"):
        task(tmp_path, data=write(tmp_path / "d.jsonl", data)).levels("test", 5)
    with pytest.raises(InputError, match="not found"):
        task(tmp_path, data=tmp_path / "none.jsonl").levels("test", 5)
    with pytest.raises(UsageError, match="needs data="):
        task_from_record(None, "jsonl", None, [])



def grouped(n_groups=6, per=3, **extra):
    """`n_groups` facts, each asked `per` ways (one group each)."""
    return [{"prompt": f"phrasing {k} of question {g}", "context": f"the answer is {g}",
             "answer": str(g), "id": f"g{g}p{k}", "group": f"fact{g}", **extra}
            for g in range(n_groups) for k in range(per)]


def test_a_group_is_one_unit_and_never_straddles_the_split(tmp_path):
    data = write(tmp_path / "d.jsonl", grouped(8))
    for seed in range(12):
        t = task(tmp_path, "test_share=0.25", f"split_seed={seed}", data=data)
        test = t.levels("test", 100)
        train = {it.group for it in jsonl.items(t.config) if it.split == "train"}
        assert len(test) == 2 * 3 and not train & {it.group for it in test}
        assert {t.unit(it) for it in test} == {it.group for it in test}
    assert t.unit_name == "group" and task(tmp_path).unit_name == "item"


def test_naming_each_item_its_own_group_splits_as_no_groups_do(tmp_path):
    """The draw over groups is the draw over items when every group is one item: data written
    before groups existed keeps its split."""
    plain = rows(20)
    own = [{**r, "group": r["id"]} for r in plain]
    for seed in range(5):
        a = task(tmp_path, f"split_seed={seed}", data=write(tmp_path / "a.jsonl", plain))
        b = task(tmp_path, f"split_seed={seed}", data=write(tmp_path / "b.jsonl", own))
        assert [it.id for it in a.levels("test", 99)] == [it.id for it in b.levels("test", 99)]


def test_a_group_follows_its_named_split_and_a_conflict_is_named(tmp_path):
    data = grouped(4)
    data[0]["split"] = "test"  # the rest of fact0 follows it
    data[3]["split"] = "train"
    t = task(tmp_path, data=write(tmp_path / "d.jsonl", data))
    assert {it.id for it in t.levels("test", 99)} >= {"g0p0", "g0p1", "g0p2"}
    assert all(it.split == "train" for it in jsonl.items(t.config) if it.group == "fact1")
    data[1]["split"] = "train"
    with pytest.raises(InputError, match=r"d2.jsonl:2: group 'fact0' is marked 'train' here and "
                                          r"'test' at .*d2.jsonl:1"):
        task(tmp_path, data=write(tmp_path / "d2.jsonl", data)).levels("test", 5)
    clash = rows(3)
    clash[0]["group"] = "q1"  # q1 is an ungrouped item's id: the two would silently merge
    with pytest.raises(InputError, match=r"d3.jsonl:1: group 'q1' is also the id of the item "
                                          r"at .*d3.jsonl:2"):
        task(tmp_path, data=write(tmp_path / "d3.jsonl", clash)).levels("test", 5)
    bad = rows(3)
    bad[1]["group"] = ["a"]
    with pytest.raises(InputError, match=r"d4.jsonl:2: \"group\" must be text or a whole "
                                          r"number \(items of one fact share it\), not list$"):
        task(tmp_path, data=write(tmp_path / "d4.jsonl", bad)).levels("test", 5)


def test_n_levels_takes_whole_groups_and_the_wrong_c_comes_from_another_group(tmp_path):
    data = grouped(4)
    for r in data:  # each phrasing words its fact's c its own way
        r["context"] += f" (as put in {r['id']})"
        r["split"] = "test"
    data.append({**rows(1)[0], "split": "train"})
    t = task(tmp_path, data=write(tmp_path / "d.jsonl", data))
    assert [it.id for it in t.levels("test", 5)] == ["g0p0", "g0p1", "g0p2"]  # not g1's first 2
    assert len(t.levels("test", 6)) == 6 and len(t.levels("test", 2)) == 3  # one group at least
    levels = t.levels("test", 99)
    for i, lv in enumerate(levels):
        wrong = t.control_context(levels, i, "context")
        owner = next(it for it in jsonl.items(t.config) if it.context == wrong)
        assert owner.group != lv.group, (lv.id, wrong)
    assert [it.id for it in task(tmp_path).levels("test", 2)] == [
        it.id for it in task(tmp_path).levels("test", 99)][:2]  # no groups: the first n

# -- scorers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("options, response, right", [
    ([], "5", True), ([], " 5 ", True), ([], "55", False),
    (["scorer=contains"], "it is 5!", True), (["scorer=startswith"], "5 is it", True),
    (["scorer=startswith", "pattern=Ahoy"], "ahoy, 5", True),
    (["scorer=startswith", "pattern=Ahoy"], "5", False),
    (["scorer=regex", "pattern=^[0-9]+$"], "5", True),
    (["scorer=regex", "pattern=^[0-9]+$"], "five", False),
])
def test_builtin_scorers(tmp_path, options, response, right):
    t = task(tmp_path, *options)
    item = next(it for it in jsonl.items(t.config) if it.id == "q4")
    assert t.score(item, response).won is right


def test_a_regex_pattern_from_a_file_and_the_language_scorer(tmp_path):
    (tmp_path / "p.txt").write_text("^Ahoy\n")
    t = task(tmp_path, "scorer=regex", f"pattern=@{tmp_path / 'p.txt'}")
    item = jsonl.items(t.config)[0]
    assert t.score(item, "Ahoy there").won and not t.score(item, "hello").won
    fr = task(tmp_path, "scorer=language", "language=fr")
    assert fr.score(item, "La capitale de la France est Paris.").won
    assert not fr.score(item, "The capital of France is Paris.").won


def test_your_scorer_gets_the_item_and_the_raw_response(tmp_path):
    (tmp_path / "score.py").write_text(
        "def fn(item, response):\n"
        "    return response.startswith('Ahoy') and item['id'] != 'q1'\n"
        "def half(item, response):\n    return 0.5\n"
        "def broken(item, response):\n    raise KeyError('gold')\n")
    t = task(tmp_path, f"scorer={tmp_path / 'score.py'}:fn")
    items = {it.id: it for it in jsonl.items(t.config)}
    assert t.score(items["q0"], "Ahoy!").won and not t.score(items["q1"], "Ahoy!").won
    assert task(tmp_path, f"scorer={tmp_path / 'score.py'}:half").score(items["q0"], "").won
    with pytest.raises(UsageError, match=r"raised KeyError: 'gold' on item 'q3' \(.*d.jsonl:4\)"):
        task(tmp_path, f"scorer={tmp_path / 'score.py'}:broken").score(items["q3"], "x")
    with pytest.raises(UsageError, match="scorer file .*nope.py not found"):
        task(tmp_path, f"scorer={tmp_path / 'nope.py'}:fn").score(items["q0"], "x")
    with pytest.raises(UsageError, match="has no function 'other'"):
        task(tmp_path, f"scorer={tmp_path / 'score.py'}:other").score(items["q0"], "x")


def test_no_scorer_and_no_answers_is_unscored(tmp_path):
    t = task(tmp_path, data=write(tmp_path / "d.jsonl", rows(answer=False)))
    assert not t.scored
    assert t.max_response_tokens() == jsonl.DEFAULT_BUDGET
    assert task(tmp_path).max_response_tokens() == len("12") + jsonl.BUDGET_MARGIN


# -- chat placement ---------------------------------------------------------------------------

TEMPLATE = ("{% if messages[0]['role'] != 'system' %}<s>default</s>{% endif %}"
            "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>"
            "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.mark.parametrize("where, expect_c, expect_x", [
    ("system", "<system>C</system><user>hi</user><assistant>",
     "<s>default</s><user>hi</user><assistant>"),
    ("user", "<s>default</s><user>C\n\nhi</user><assistant>",
     "<s>default</s><user>hi</user><assistant>"),
    ("prefix", "C\n<s>default</s><user>hi</user><assistant>",
     "<s>default</s><user>hi</user><assistant>"),
])
def test_where_c_goes_in_a_chat_template(tmp_path, tok, where, expect_c, expect_x):
    import copy

    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = TEMPLATE
    data = write(tmp_path / "d.jsonl", [{"prompt": "hi", "context": "C", "split": "test"},
                                        {"prompt": "yo", "context": "D", "split": "train"}])
    t = task(tmp_path, f"context_as={where}", data=data).for_tokenizer(chat_tok)
    lv = t.levels("test", 1)[0]
    assert t.prompt(lv, "C") == expect_c and t.prompt(lv) == expect_x


DROPS_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}"
                "{% endif %}{% endfor %}")


def test_a_chat_template_that_drops_the_context_is_refused_before_any_work(tmp_path, tok):
    """Probe 9 Q-A: a template rendering only user turns never shows c (a system message), so
    both views were one prompt and evaluate reported "context irrelevant" with exit 0."""
    import copy

    chat_tok = copy.deepcopy(tok)
    chat_tok.chat_template = DROPS_SYSTEM
    data = write(tmp_path / "d.jsonl", [{"prompt": "hi", "context": "C", "split": "test"},
                                        {"prompt": "yo", "context": "D", "split": "train"}])
    with pytest.raises(UsageError, match="drops the context.*context_as=user") as err:
        task(tmp_path, data=data).for_tokenizer(chat_tok)
    assert "\n" not in str(err.value)
    t = task(tmp_path, "context_as=user", data=data).for_tokenizer(chat_tok)  # the remedy works
    lv = t.levels("test", 1)[0]
    assert t.prompt(lv, "C") != t.prompt(lv)


def test_a_data_file_changed_since_the_run_trained_on_it_is_refused(tmp_path, tok):
    """Probe 9 Q-C: a line added to the run's data file redraws the seeded held-out split, so
    "held-out" evaluation took in a training item with exit 0; the run's recorded sha256 of
    the file was never compared."""
    from nca_interp.checkpoint import content_digest
    from nca_interp.runs import task_for_checkpoints
    from nca_interp.tasks import task_record

    data = write(tmp_path / "d.jsonl", rows())
    record = task_record(task(tmp_path, "test_share=0.5", data=data))
    run = save_checkpoint(tmp_path / "run", tiny(tok), tok, run_config={
        "task": record, "context": "context", "inputs": {"task option data": {
            "path": str(data.resolve()), "sha256": content_digest(data)}}})
    assert task_for_checkpoints([str(run)]).config.data == record["data"]  # unchanged: read
    was = content_digest(data)
    with data.open("a") as f:
        f.write(json.dumps({"id": "d99", "prompt": "Say w99", "context": "be nice"}) + "\n")
    with pytest.raises(UsageError, match="changed since.*trained on it") as err:
        task_for_checkpoints([str(run)])
    assert was in str(err.value) and content_digest(data) in str(err.value)
    assert "\n" not in str(err.value)
    other = write(tmp_path / "other.jsonl", rows())  # another file named on purpose: read
    assert task_for_checkpoints([str(run)], options=[f"data={other}"]).config.data == str(other)


def test_a_context_file_changed_since_the_run_is_refused_as_another_c(tmp_path, tok):
    """Probe 10's U-G: a changed context_file was refused for a held-out split it has none of;
    the message says what changed: c itself."""
    from nca_interp.checkpoint import content_digest
    from nca_interp.runs import task_for_checkpoints
    from nca_interp.tasks import task_record

    data = write(tmp_path / "d.jsonl", rows())
    persona = tmp_path / "persona.txt"
    persona.write_text("You are a pirate.")
    record = task_record(task(tmp_path, f"context_file={persona}", data=data))
    run = save_checkpoint(tmp_path / "run", tiny(tok), tok, run_config={
        "task": record, "context": "context", "inputs": {"task option context_file": {
            "path": str(persona.resolve()), "sha256": content_digest(persona)}}})
    persona.write_text("You are a poet.")
    with pytest.raises(UsageError, match=r"context_file\) has changed since .*: c is no longer "
                       "the one the run was trained with") as err:
        task_for_checkpoints([str(run)])
    assert "held-out split" not in str(err.value)


def test_a_relative_pattern_file_is_read_where_the_run_read_it(tmp_path, tok, monkeypatch):
    """Helper-39's note on probe 10's Q-I: a run config's `pattern=@FILE` (relative, as the
    training command gave it) was read against the folder a later command ran in, so another
    folder's file of that name became the scorer's pattern without a word. Now training
    records FILE among the run's inputs, and it is read there; changed there, it is refused."""
    from nca_interp.runs import task_for_checkpoints
    from nca_interp.tasks import task_record
    from train.common import data_inputs

    here, there = tmp_path / "trained_here", tmp_path / "elsewhere"
    for folder, pattern in ((here, "ahoy"), (there, "never")):
        (folder / "s").mkdir(parents=True)
        (folder / "s" / "p.txt").write_text(pattern)
    data = write(tmp_path / "d.jsonl", rows())
    monkeypatch.chdir(here)
    record = task_record(task(tmp_path, "scorer=regex", "pattern=@s/p.txt", data=data))
    inputs = data_inputs(record)
    assert inputs["task option pattern"] == "s/p.txt"  # the file, without the @
    from nca_interp.checkpoint import content_digest

    run = save_checkpoint(tmp_path / "run", tiny(tok), tok, run_config={
        "task": record, "context": "context", "inputs": {
            k: {"path": str(Path(v).resolve()), "sha256": content_digest(v)}
            for k, v in inputs.items()}})
    monkeypatch.chdir(there)
    read = task_for_checkpoints([str(run)]).config.pattern
    assert read == "@" + str(here / "s" / "p.txt")  # the run's file, not elsewhere/s/p.txt
    (here / "s" / "p.txt").write_text("changed")
    with pytest.raises(UsageError, match=r"p\.txt \(pattern\) has changed since .*: the "
                       "scorer's pattern is no longer the one the run was trained with") as e:
        task_for_checkpoints([str(run)])
    assert "held-out split" not in str(e.value)  # probe 11 U-N: no split is drawn from it


# -- evaluate on your data ----------------------------------------------------------------------

@pytest.fixture
def student(tok, tmp_path):
    return save_checkpoint(tmp_path / "student", tiny(tok), tok)


def test_evaluate_scores_your_data_and_records_what_it_fed_in(student, tmp_path, capsys):
    data = write(tmp_path / "d.jsonl", rows())
    report = evaluate.execute(evaluate.EvalConfig(
        ckpt=[str(student)], task="jsonl", task_options=[f"data={data}", "scorer=startswith",
                                                           "pattern=ahoy"],
        n_levels=8, out=str(tmp_path / "rep")))
    r = report["results"]["student"]
    assert r["n"] == 3 and r["metric"] == "accuracy" and r["parse_fail_no_c"] == 0.0
    assert len(r["items"]["response_no_c"]) == 3 and r["max_new"] == 2 + jsonl.BUDGET_MARGIN
    out = capsys.readouterr().out
    assert "acc_no_c" in out and "parse_fail_no_c" in out and "regime: A = context hurts" in out
    assert "response budget: 10 tokens" in out


def test_evaluate_without_a_scorer_reports_lengths_and_the_views_kl(student, tmp_path,
                                                                    capsys):
    data = write(tmp_path / "d.jsonl", rows(answer=False))
    report = evaluate.execute(evaluate.EvalConfig(
        ckpt=[str(student)], task="jsonl", task_options=[f"data={data}"], n_levels=8,
        control=True, out=str(tmp_path / "rep")))
    r = report["results"]["student"]
    assert r["scored"] is False and "correct_no_c" not in r
    assert r["kl_views"] > 0 and r["kl_views_ci95"][0] <= r["kl_views"] <= r["kl_views_ci95"][1]
    assert r["kl_views_control"] == r["control"]["kl_views"] > 0  # the wrong-c null beside it
    assert r["kl_views_control"] != r["kl_views"]
    assert r["len_no_c"] == jsonl.DEFAULT_BUDGET or r["len_no_c"] > 0
    out = capsys.readouterr().out
    assert "need a scorer" in out and "kl_views" in out
    assert (tmp_path / "rep.html").exists()


def test_the_views_kl_is_zero_when_c_changes_nothing(student, tmp_path, tok):
    """A property: with c equal to nothing the model reads (an empty-weight attention is not
    available, so: the same prompt both ways), KL(g(.|x) || g(.|x,c)) is 0."""
    from nca_interp.checkpoint import load_checkpoint

    data = write(tmp_path / "d.jsonl", rows(answer=False))
    t = task(tmp_path, data=data)
    model, tk = load_checkpoint(student)
    levels = t.levels("test", 3)

    class Same(type(t)):
        def prompt(self, level, context=None):
            return level.text()

    same = Same(**{f: getattr(t, f) for f in ("name", "game", "config", "fmt", "plan_k")})
    resp = [[tk.convert_tokens_to_ids(c) for c in "12"] for _ in levels]
    got = evaluate.views_kl(model, tk, same, levels, "context", resp, [lv.id for lv in levels])
    assert got["kl_views"] == pytest.approx(0.0, abs=1e-6)
    differ = evaluate.views_kl(model, tk, t, levels, "context", resp, [lv.id for lv in levels])
    assert differ["kl_views"] > 1e-4



def test_layer_sim_and_evaluate_count_a_group_once(student, tmp_path, capsys):
    """A fact asked three times in identical words is one fact: with the copies grouped,
    layer_sim's standard error and evaluate's units are those of the file holding each fact
    once; read as independent items, the standard error shrinks by about sqrt(3)."""
    from nca_interp import layer_sim

    train = [{"prompt": "a training item", "context": "c", "answer": "1", "id": "t",
              "split": "train"}]
    once = [{"prompt": f"what is {g} plus one", "context": f"you answer {g + 1}",
             "answer": str(g + 1), "id": f"f{g}", "split": "test"} for g in range(5)]
    thrice = [{**r, "id": f"{r['id']}_{k}", "group": r["id"]} for r in once for k in range(3)]
    loose = [{k: v for k, v in r.items() if k != "group"} for r in thrice]
    ids = {}

    def run(name, rows_):
        data = write(tmp_path / f"{name}.jsonl", train + rows_)
        opts = [f"data={data}"]
        full = layer_sim.execute(layer_sim.LayerSimConfig(
            ckpt=[str(student)], task="jsonl", task_options=opts, n_levels=50, baselines=False,
            threads=1, out=str(tmp_path / name)))
        ids[name] = full["data"]["ids"]
        ls = full["results"]["student"]
        ev = evaluate.execute(evaluate.EvalConfig(
            ckpt=[str(student)], task="jsonl", task_options=opts, n_levels=50, threads=1,
            out=str(tmp_path / f"{name}_ev")))["results"]["student"]
        return ls, ev

    (a, ea), (b, eb), (c, ec) = run("once", once), run("thrice", thrice), run("loose", loose)
    assert b["n_units"] == a["n_units"] == 5 and c["n_units"] == 15
    assert (ea["n_units"], eb["n_units"], eb["unit"], ec["n_units"]) == (5, 5, "group", 15)
    assert b["cos"] == pytest.approx(a["cos"], abs=1e-6)
    assert b["cos_se"] == pytest.approx(a["cos_se"], rel=1e-4)
    assert all(se > 0 for se in b["cos_se"])
    assert eb["items"]["id"] == [f"f{g}_{k}" for g in range(5) for k in range(3)]
    assert eb["items"]["unit"] == [f"f{g}" for g in range(5) for k in range(3)]
    assert ids["thrice"] == eb["items"]["id"]  # the report keeps the items, not only groups
    out = capsys.readouterr().out
    assert "only 5 groups: a percentile bootstrap over fewer than 10 units" in out
    assert "15 items in 5 independent units: cos_se clusters by them" in out
    ratio = [lo / gr for lo, gr in zip(c["cos_se"], b["cos_se"])]
    # sqrt(S / 70) over sqrt(S / 20), S the facts' summed squared deviations
    assert ratio == pytest.approx([(20 / 70) ** 0.5] * len(ratio), rel=1e-3)

def test_task_options_as_a_dict_a_list_or_a_comma_string(tmp_path):
    from nca_interp import analysis

    data = write(tmp_path / "d.jsonl", rows())
    for given in ({"data": str(data), "scorer": "exact"}, [f"data={data}", "scorer=exact"],
                  f"data={data},scorer=exact"):
        cfg = analysis.config(evaluate.EvalConfig, None, {"ckpt": ["x"], "task_options": given})
        assert cfg.task_options == [f"data={data}", "scorer=exact"]


def test_ckpt_by_flag_and_bare_arguments_keeps_both():
    from nca_interp.cli import parse_config

    cfg = parse_config(evaluate.EvalConfig, ["--ckpt", "base", "opd"], positional="ckpt")
    assert cfg.ckpt == ["base", "opd"]
    assert parse_config(evaluate.EvalConfig, ["opd", "nca"], positional="ckpt").ckpt == \
        ["opd", "nca"]
    assert parse_config(evaluate.EvalConfig, ["--ckpt", "a,b"], positional="ckpt").ckpt == \
        ["a", "b"]


def test_two_folders_of_one_name_get_two_labels():
    from nca_interp import analysis

    got = analysis.short_labels(["runs/opd/final", "runs/nca/final", "runs/base"])
    assert got == {"runs/opd/final": "opd/final", "runs/nca/final": "nca/final",
                   "runs/base": "base"}


def test_param_delta_takes_the_schedule_of_checkpoints_not_trained_here(tok, tmp_path,
                                                                        capsys):
    """A foreign pair (no run config): the Adam-normalised view is '-' with the reason said,
    and --lr / --steps supply the budget sum_t lr_t (constant: lr x steps)."""
    from nca_interp import param_delta

    base = tmp_path / "base"
    for name, seed in (("base", 0), ("a", 1), ("b", 2)):
        tiny(tok, seed=seed).save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    argv = [str(tmp_path / "a"), str(tmp_path / "b"), "--init", str(base),
            "--out", str(tmp_path / "out" / "pd")]
    report = param_delta.main(argv)
    assert report["results"][str(tmp_path / "a")]["lr_budget"] is None
    assert "adam columns '-' for a, b: no learning rate" in capsys.readouterr().out
    report = param_delta.main([*argv, "--lr", "0.001", "--steps", "20"])
    r = report["results"][str(tmp_path / "a")]
    assert r["lr_budget"] == pytest.approx(0.02)
    assert r["global_adam"] == pytest.approx(r["global_adam"]) and r["global_adam"] > 0
    assert "adam columns '-'" not in capsys.readouterr().out


def test_to_frame_gives_one_tidy_row_per_number():
    """Every number of a report is one row (run, metric, index, value), with the run's
    identity; a per-layer list becomes indexed rows and strings stay out."""
    from nca_interp import analysis

    report = {"config": {}, "task": "t", "context": "c",
              "runs": {"a": {"method": "opd", "seed": 0, "beta": 0.0, "step": None}},
              "results": {"a": {"correct_c": 0.5, "regime": "A", "ci95": {"correct_c": [0.4, 0.6]},
                                "layers": {"cos": [0.9, 0.8]}}}}
    df = analysis.to_frame(report)
    assert set(df.metric) == {"correct_c", "ci95.correct_c", "layers.cos"}
    assert df[df.metric == "correct_c"].value.tolist() == [0.5]
    assert df[df.metric == "layers.cos"].sort_values("index").value.tolist() == [0.9, 0.8]
    assert (df.method == "opd").all() and (df.seed == 0).all()
    assert len(df) == 5


def test_a_repeated_list_flag_keeps_every_value():
    from nca_interp.cli import parse_config

    cfg = parse_config(evaluate.EvalConfig, ["--ckpt", "a", "--ckpt", "b", "--task-options",
                                             "x=1", "--task-options=y=2"], positional="ckpt")
    assert cfg.ckpt == ["a", "b"] and cfg.task_options == ["x=1", "y=2"]
    assert parse_config(evaluate.EvalConfig, ["--n-levels", "4", "--n-levels", "5"]).n_levels \
        == 5  # a one-value flag: the last overrides


def test_a_bad_regex_or_language_is_refused_before_any_response(tmp_path):
    with pytest.raises(UsageError, match=r"'\(' is not a regular expression"):
        task(tmp_path, "scorer=regex", "pattern=(")
    with pytest.raises(UsageError, match="language='xx' is not a language code"):
        task(tmp_path, "scorer=language", "language=xx")
    with pytest.raises(ValueError, match="test_share takes a number"):
        task(tmp_path, "test_share=half")


def test_patching_without_a_score_is_one_line(student, tmp_path):
    from nca_interp import patching

    data = write(tmp_path / "d.jsonl", rows(answer=False))
    with pytest.raises(UsageError, match="patching follows harm or help cases, which need a "
                                         "score"):
        patching.run([str(student)], task="jsonl", task_options=[f"data={data}"])


def test_every_report_records_the_data_file_the_prompts_and_the_responses(student, tmp_path):
    """A reader can check what was fed in: the sha256 of the data file (computed here
    independently), the test items' ids and prompts in order, and each response analysed."""
    import hashlib

    from nca_interp import grad_align, layer_sim

    data = write(tmp_path / "d.jsonl", rows())
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    opts = [f"data={data}", "scorer=startswith", "pattern=ahoy"]
    held_out = task(tmp_path, data=data).levels("test", 8)
    ev = evaluate.run([str(student)], task="jsonl", task_options=opts, n_levels=8)
    ls = layer_sim.run([str(student)], task="jsonl", task_options=opts, n_levels=8,
                       baselines=False)
    ga = grad_align.run([str(student)], task="jsonl", task_options=opts, teacher=str(student),
                        batch=4, micro_batch=2, parts=2)
    for report in (ev, ls, ga):
        d = report["data"]
        assert d["files"]["data"] == {"path": str(data), "sha256": digest}
    for report in (ev, ls):
        assert report["data"]["units"] == [lv.id for lv in held_out]
        assert report["data"]["prompts"] == [lv.prompt for lv in held_out]
    assert len(ls["results"]["student"]["responses"]) == len(held_out)
    assert len(ga["results"]["student"]["responses"]) == 4 == len(ga["data"]["units"])
    assert ev["data"]["prompts_sha256"] == hashlib.sha256(
        "\n".join(lv.prompt for lv in held_out).encode()).hexdigest()


def test_a_report_from_before_the_unit_floor_goes_beside_on_its_own_rule(student, tmp_path,
                                                                         monkeypatch):
    """A layer_sim report written before `cos_other` kept a unit's items apart (no
    `other_pairs`) paired the next item: `--beside` recomputes its base on that rule, so the
    check passes and new entries compare with the carried ones; on the new rule the grouped
    items' floor differs and the report would be refused."""
    import functools

    from nca_interp import layer_sim

    rows_ = grouped(3, 2, split="test") + [{**rows(1)[0], "split": "train"}]
    opts = [f"data={write(tmp_path / 'd.jsonl', rows_)}"]
    new = layer_sim.run(ckpt=[str(student)], task="jsonl", task_options=opts, n_levels=50,
                        threads=1)
    old_code = functools.partial(layer_sim.layer_similarity, other=layer_sim.OTHER_NEXT)
    with monkeypatch.context() as m:
        m.setattr(layer_sim, "layer_similarity", old_code)
        layer_sim.execute(layer_sim.LayerSimConfig(
            ckpt=[str(student)], task="jsonl", task_options=opts, n_levels=50, threads=1,
            out=str(tmp_path / "old")))
    report = json.loads((tmp_path / "old.json").read_text())
    del report["other_pairs"]  # as an older report has it
    (tmp_path / "old.json").write_text(json.dumps(report))
    old_floor = report["results"]["student"]["cos_other"]
    assert max(abs(a - b) for a, b in zip(old_floor, new.results["student"].cos_other)) > 1e-2
    rep = layer_sim.run(beside=str(tmp_path / "old.json"), threads=1)
    assert rep.other_pairs == layer_sim.OTHER_NEXT and rep.beside["checked"]["max_abs_diff"] < 1e-5
    assert new.other_pairs == layer_sim.OTHER_UNIT
