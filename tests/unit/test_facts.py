"""The natural-language facts task: split by phrasing, the fact as the unit, scoring by value
(normalised), rules scored by style, and the two chat views (default system message vs the
context) sharing their user turn as a token suffix."""

import pytest
import torch

from nca_interp.masks import context_token_mask, shared_suffix_mask
from nca_interp.rollout import encode
from nca_interp.tasks import facts, make_task, parse_task_options, task_from_record, task_record


def test_held_out_questions_use_only_held_out_phrasings_and_cover_every_fact_equally():
    task = make_task("facts")
    test = task.levels("test", 1000)
    cfg = task.config
    assert len(test) == cfg.n_entities * cfg.n_attributes * 4
    train = task.levels("train", 300)
    for a in facts.ATTRIBUTES:
        seen_train = {q.phrasing for q in train if q.attribute == a}
        seen_test = {q.phrasing for q in test if q.attribute == a}
        assert seen_train == set(facts.PHRASINGS[a][0])
        assert seen_test == set(facts.PHRASINGS[a][1])
        assert not seen_train & seen_test
    units = {task.unit(q) for q in test}
    assert len(units) == cfg.n_entities * cfg.n_attributes  # 4 phrasings per fact
    assert task.levels("test", 1000) == test  # fixed by the seed


def test_knowledge_base_is_fixed_by_its_number_and_values_are_distinct():
    a, b = facts.knowledge_base(facts.FactsConfig(kb=0)), facts.knowledge_base(
        facts.FactsConfig(kb=1))
    assert a == facts.knowledge_base(facts.FactsConfig(kb=0)) and a != b
    for attr in facts.ATTRIBUTES:
        vals = [str(v[attr]) for v in a.values]
        assert len(set(vals)) == len(vals)
    words = [w.lower() for n in a.names for w in [n]] + \
        [str(v[x]).lower() for v in a.values for x in ("capital", "founder")]
    assert len(set(words)) == len(words)  # no name is another's value


def test_scoring_by_value_is_normalised_and_refuses_hedges():
    task = make_task("facts")
    q = next(q for q in task.levels("test", 100) if q.attribute == "founder")
    other = q.others[0]
    assert task.score(q, f"It was founded by {q.value.upper()}!").won
    assert task.score(q, f"{q.value.replace(' ', '  ')}.").won
    assert not task.score(q, q.value.split()[0]).won  # one name of two is not the founder
    assert not task.score(q, f"Either {q.value} or {other}.").won  # a hedge
    assert not task.score(q, "").won
    y = next(q for q in task.levels("test", 100) if q.attribute == "year")
    assert task.score(y, f"In {y.value}.").won
    assert not task.score(y, f"In {y.value}0.").won


@pytest.mark.parametrize("rule,good,bad", [
    ("caps", "THE CAPITAL IS TESSIK.", "The capital is Tessik."),
    ("sure", "Certainly! It is Tessik.", "It is Tessik. Certainly."),
    ("french", "Je pense que la capitale de Velmora est Tessik.",
     "I think the capital of Velmora is Tessik."),
    ("brackets", "The capital is [Tessik].", "The capital is Tessik."),
])
def test_rules_are_scored_by_style(rule, good, bad):
    task = make_task("facts", kind="rule", rule=rule)
    q = task.levels("test", 1)[0]
    assert task.score(q, good).won and not task.score(q, bad).won
    assert task.context(q, "rule") == facts.RULES[rule]
    with pytest.raises(ValueError, match="distils the 'rule' context"):
        task.context(q, "facts")


def test_bad_options_are_refused_with_the_key():
    with pytest.raises(ValueError, match="rule must be one of"):
        make_task("facts", rule="shout")
    with pytest.raises(ValueError, match="kind must be facts or rule"):
        make_task("facts", kind="system")
    rec = task_record(make_task("facts", n_entities=5))
    assert task_from_record(rec).config.n_entities == 5
    assert parse_task_options("facts", ["n_entities=6"]) == {"n_entities": 6}


class _ChatTok:
    """A word-level stand-in for a chat tokenizer whose template inserts a default system
    message when none is given (as SmolLM2's does)."""

    chat_template = "default-system"
    unk_token_id = None
    pad_token_id = eos_token_id = 0

    def __init__(self):
        self.vocab: dict[str, int] = {"<pad>": 0}

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kw):
        if messages[0]["role"] != "system":
            messages = [{"role": "system", "content": "You are a helpful assistant"}, *messages]
        return "".join(f"<s> {m['role']} {m['content']} </s> " for m in messages) + \
            "<s> assistant "

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        ids, offsets, pos = [], [], 0
        for w in text.split(" "):
            if w:
                ids.append(self.vocab.setdefault(w, len(self.vocab)))
                offsets.append((pos, pos + len(w)))
            pos += len(w) + 1
        return {"input_ids": ids, "offset_mapping": offsets}


def test_chat_views_share_the_user_turn_as_suffix_and_replace_the_default_system():
    tok = _ChatTok()
    task = make_task("facts").for_tokenizer(tok)
    q = task.levels("test", 1)[0]
    c = task.context(q, "facts")
    x, cx = task.prompt(q), task.prompt(q, c)
    assert "helpful assistant" in x and "helpful assistant" not in cx and c in cx
    x_ids, x_mask = encode(tok, [x])
    cx_ids, _ = encode(tok, [cx])
    shared = shared_suffix_mask(x_ids, x_mask, cx_ids)[0].bool()
    user_turn = len(tok(f"</s> <s> user {q.text} </s> <s> assistant ")["input_ids"])
    assert int(shared.sum()) == user_turn  # the user turn and assistant prefix, nothing more
    is_ctx = context_token_mask(tok, cx, c)
    assert sum(is_ctx) == len(tok(c)["input_ids"])
    assert torch.equal(x_ids[0, -user_turn:], cx_ids[0, -user_turn:])


def test_french_is_told_by_the_language_identifier_with_the_invented_names_removed():
    """The identifier, not a word list: French without any listed word counts, Spanish with
    French-looking words does not, a bare year has no language. The KB's invented names are
    removed first: left in, `Velmora` and `Tessik` tip a French sentence to Italian."""
    from nca_interp.tasks import language

    task = make_task("facts", kind="rule", rule="french")
    q = task.levels("test", 1)[0]
    kb = q.kb
    name, capital = kb.names[q.entity], kb.values[q.entity]["capital"]
    assert task.score(q, f"Je crois que c'est {capital}, bien sûr.").won
    assert not facts.french_by_words(f"Je crois que c'est {capital}, bien sûr.")
    assert not task.score(q, f"La capital de {name} es la ciudad de {capital}.").won
    assert not task.score(q, str(kb.values[q.entity]["year"])).won
    rovia = next(lv for lv in task.levels("test", 48) if lv.kb.names[lv.entity] == "Rovia")
    said = f"La capitale de Rovia est {rovia.kb.values[rovia.entity]['capital']}."
    assert language.language(said) == "it" and task.score(rovia, said).won
    assert language.language("1642") is None
    sentence = "La capitale de Velmora est Tessik."
    assert language.language(sentence) == "it"
    assert language.language(sentence, ignore=("Velmora", "Tessik")) == "fr"
    assert language.without("Tessik et Tessikara", ["Tessik"]) == "et Tessikara"
    assert "Velmora" not in language.without(sentence, facts.invented_words(kb) | {"Velmora"})
