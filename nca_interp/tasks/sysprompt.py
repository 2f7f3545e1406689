"""A fixed-system-prompt QA task sized for tiny models: invented facts, multiple choice.

A knowledge base (KB) is `n_entities` invented entities, each with one invented value per
attribute; values of one attribute differ between entities. It is the system prompt, in one of
three layouts:
  rows   (default) one line per entity, values first, the entity's name last:
         "town d, lake x: K"
  facts  one fact per line, value first, the key last: "d is town of K"
  table  a header naming the columns, then "K: d x" (the first layout tried)
A compact question lists its options value-first (`q:A f:B d:C h:D`) and then asks `lake of K`;
the response is the chosen option's text (`response=value`; `letter` / `value_letter` exist).
With `rows` / `facts` the prompt ends on the same token that ends the fact in the KB (the
entity), which makes reading a lookup a small model learns quickly: attend to the earlier
occurrence of the current token and copy what was written *before* it (values come first, so
the KB's name token has already gathered its values). With the table (name first, values after)
the lookup needs an induction circuit keyed on several tokens; 4-layer d=128 teachers stayed at
chance on it for 1500 steps x 64 questions, while with `train.sft --pack 8 --batch 256` the
same model read 4 x 1 `facts` KBs at 0.945 after 300 steps and 4 x 2 `rows` KBs at 0.625 after
1000. Keys of several tokens at the end of the line (`facts` with 3 attributes: "lake of K" is
shared by 3 facts up to its last word) stayed near chance (0.105 after 300 steps): the entity
alone must pick the line. README, "System-prompt QA", has the commands.
One-character names and values (`word_len=1`) suit the char tokenizer; `word_len=3` gives
invented words.
A question asks for one attribute of one entity; its options are the entity's value and the
values *other entities of the same KB* have for that attribute, so every option is a real value
in the KB and only the entity -> value binding in the KB tells which is right (no option can be
picked from the question alone, or from knowing which words are values).

Settings (OPCD's system-prompt setting, made tiny):
  teacher SFT   a fresh random KB per example, always readable from its system prompt (with
                `train.sft --pack N`, N questions about the same KB, each answer trained)
  OPD / NCA     one fixed KB (`kb`, default 0) as the privileged context; the student must answer
                its questions without it, i.e. internalize the KB
Split (by option order): the 24 orders of 4 options are split in two halves, each with every
answer position equally often (even / odd permutations, `_orders`); training questions use one
half, held-out questions the other, so a held-out question asks a trained fact with its options
in an arrangement never trained on (the answer cannot be remembered as a position). For a
fixed KB the held-out set is finite (entities x attributes x distractor sets x held-out
orders: 96 questions for 4 x 2) and `all_test_questions` enumerates it.
A split by phrasing (an unseen wording) was tried first: a 4-layer teacher read table KBs at
0.56 under trained phrasings but 0.36 under the unseen one after 600 steps, so phrasing
generalization, not reading, would dominate; there is one phrasing.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
from dataclasses import dataclass, replace

from nca_interp.errors import UsageError
from nca_interp.tasks.base import (
    MAX_SEED,
    QATask,
    TaskSpec,
    check_types,
    parse_answer,
    register,
    rotated,
    whole,
)

__all__ = ["LETTERS", "SyspromptConfig", "SyspromptTask", "compact_target", "cue", "parse_compact",
           "system_prompt"]

ATTRIBUTES = ("town", "lake", "tint", "rock", "dish", "game")  # equal lengths: fixed layout
PHRASINGS = ("{a} of {e}?",)
LETTERS = "ABCDEFGH"
RESPONSES = ("value", "letter", "value_letter")
LAYOUTS = ("facts", "rows", "table")
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"
_NAMES_1 = "KMNPQRSTVWXZ"  # one-character entity names: capitals that are not option letters
_VALUES_1 = "bcdfghjklmnpqrstvwxz"
MAX_ENTITIES_3 = 40  # invented words: 980 exist, and each entity takes 1 + n_attributes
MAX_HELD_OUT = 100_000  # held-out questions of a fixed KB: enumerating more takes minutes


@dataclass(frozen=True)
class SyspromptConfig:
    kb: int | None = 0  # the fixed KB distilled; None: a fresh random KB per question
    n_entities: int = 4
    n_attributes: int = 2
    n_options: int = 4
    word_len: int = 1  # 1: one-character names/values (tiny char models); 3: invented words
    min_entities: int | None = None  # random KBs only: entities drawn from min..n_entities
    roster: bool = True  # every KB names the same entities in the same order (only values vary)
    response: str = "value"  # compact responses: value (option text) | letter | value_letter
    layout: str = "rows"  # KB rendering (compact questions follow it): facts | rows | table

    def __post_init__(self):
        check_types(self)
        if self.kb is not None:
            whole("kb", self.kb, 0, MAX_SEED, " (which knowledge base; none: a fresh one each "
                  "question)")
        if self.word_len not in (1, 3):
            raise UsageError("task option word_len must be 1 (single characters) or 3 "
                             f"(invented words), not {self.word_len!r}")
        most = len(_NAMES_1) if self.word_len == 1 else MAX_ENTITIES_3
        whole("n_entities", self.n_entities, 2, most, f" with word_len {self.word_len}")
        if self.min_entities is not None:
            whole("min_entities", self.min_entities, 1, self.n_entities,
                  f" (random KBs' fewest entities; at most n_entities {self.n_entities})")
        whole("n_options", self.n_options, 2, min(self.n_entities, len(LETTERS)),
              f" (at most n_entities {self.n_entities} and {len(LETTERS)}: distractors are "
              "other entities' values)")
        whole("n_attributes", self.n_attributes, 1, len(ATTRIBUTES))
        if self.layout not in LAYOUTS:
            raise UsageError(f"layout must be one of {LAYOUTS}, not {self.layout!r}")
        if self.response not in RESPONSES:
            raise UsageError(f"response must be one of {RESPONSES}, not {self.response!r}")
        held_out = n_held_out(self)
        if self.kb is not None and held_out > MAX_HELD_OUT:
            raise UsageError(f"n_entities {self.n_entities}, n_attributes {self.n_attributes} "
                             f"and n_options {self.n_options} make {held_out:,} held-out "
                             f"questions, more than the {MAX_HELD_OUT:,} enumerated in seconds; "
                             "use fewer entities or options")


def n_held_out(cfg: SyspromptConfig) -> int:
    """How many questions `all_test_questions` enumerates: entity x attribute x phrasing x
    distractor set x held-out option order (half of the n_options! orders)."""
    return (cfg.n_entities * cfg.n_attributes * len(PHRASINGS)
            * math.comb(cfg.n_entities - 1, cfg.n_options - 1)
            * math.factorial(cfg.n_options) // 2)


@dataclass(frozen=True)
class KnowledgeBase:
    names: tuple[str, ...]  # entity names
    attributes: tuple[str, ...]
    values: tuple[tuple[str, ...], ...]  # values[entity][attribute]
    layout: str = "rows"

    def render(self) -> str:
        """The system prompt. `facts`: one fact per line, value first and the key last
        ("d is town of K"); `rows`: one line per entity ending with its name ("town d, lake x:
        K"); `table`: a header naming the attribute columns, then rows like "K: d x"."""
        pairs = list(zip(self.names, self.values))
        if self.layout == "facts":
            return "\n".join(f"{v} is {a} of {n}" for n, vals in pairs
                             for a, v in zip(self.attributes, vals))
        if self.layout == "rows":
            return "\n".join(", ".join(f"{a} {v}" for a, v in zip(self.attributes, vals))
                             + f": {n}" for n, vals in pairs)
        rows = [f"{n}: " + " ".join(vals) for n, vals in pairs]
        return "\n".join(["#: " + " ".join(self.attributes), *rows])


@dataclass(frozen=True)
class Question:
    kb: KnowledgeBase
    entity: int
    attribute: int
    phrasing: str
    options: tuple[str, ...]
    answer: str  # option letter

    @property
    def key(self) -> str:
        return f"{self.kb.render()}|{self.text}|{' '.join(self.options)}"

    @property
    def text(self) -> str:
        """`lake of K?`; with the facts and rows layouts the compact prompt ends on the key
        (`lake of K`), the way every fact in the KB ends, and the answer follows it."""
        text = self.phrasing.format(a=self.kb.attributes[self.attribute],
                                    e=self.kb.names[self.entity])
        return text if self.kb.layout == "table" else text.rstrip("?")

    @property
    def solution(self) -> str:
        return self.answer

    @property
    def value(self) -> str:
        return self.options[LETTERS.index(self.answer)]


def _words(rng: random.Random, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = rng.choice(_CONSONANTS) + rng.choice(_VOWELS) + rng.choice(_CONSONANTS)
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def knowledge_base(seed: int | str, cfg: SyspromptConfig,
                   n_entities: int | None = None) -> KnowledgeBase:
    """The KB of `seed` (fixed KBs use their number; random ones a string); same seed, same KB.
    `n_entities` overrides the config's (random-KB curriculum)."""
    n = n_entities or cfg.n_entities
    rng = random.Random(f"kb-{seed}-{n}-{cfg.n_attributes}-{cfg.word_len}")
    attrs = ATTRIBUTES[: cfg.n_attributes]
    if cfg.word_len == 1:
        names = list(_NAMES_1[:n]) if cfg.roster else rng.sample(_NAMES_1, n)
        per_attr = [rng.sample(_VALUES_1, n) for _ in attrs]
    else:
        taken: set[str] = set()
        roster = random.Random("roster")
        names = [w.capitalize() for w in _words(roster if cfg.roster else rng, n, taken)]
        per_attr = [_words(rng, n, taken) for _ in attrs]
    # values of one attribute are distinct across entities (per_attr rows are samples)
    values = tuple(tuple(per_attr[a][e] for a in range(len(attrs))) for e in range(n))
    return KnowledgeBase(tuple(names), attrs, values, cfg.layout)


def _question(kb: KnowledgeBase, entity: int, attribute: int, phrasing: str,
              distractors: tuple[int, ...], order: tuple[int, ...],
              extra: tuple[str, ...] = ()) -> Question:
    """`distractors`: other entity indices; `extra`: distractor values from outside the KB
    (curriculum KBs with fewer entities than options); `order`: a permutation of the options."""
    pool = [kb.values[entity][attribute]] + [kb.values[d][attribute] for d in distractors]
    pool += list(extra)
    options = tuple(pool[i] for i in order)
    return Question(kb, entity, attribute, phrasing, options, LETTERS[order.index(0)])


def _orders(n: int, split: str) -> list[tuple[int, ...]]:
    """Option orders of `split`: permutations whose parity is even (train) or odd (test); each
    half puts the right answer (index 0) in every position equally often."""
    perms = list(itertools.permutations(range(n)))
    parity = [sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n)) % 2 for p in perms]
    return [p for p, par in zip(perms, parity) if par == (split == "test")]


def _draw(rng: random.Random, kb: KnowledgeBase, cfg: SyspromptConfig,
          split: str) -> Question:
    """A random question about `kb`: entity, attribute, phrasing, distractors (other entities'
    values; values from outside the KB only when it has fewer entities than options), order."""
    n = len(kb.names)
    entity, attribute = rng.randrange(n), rng.randrange(cfg.n_attributes)
    phrasing = rng.choice(PHRASINGS)
    others = [e for e in range(n) if e != entity]
    distractors = tuple(rng.sample(others, min(len(others), cfg.n_options - 1)))
    column = {kb.values[e][attribute] for e in range(n)}
    outside = sorted(set(_VALUES_1 if cfg.word_len == 1 else _words(rng, 20, set())) - column)
    extra = tuple(rng.sample(outside, cfg.n_options - 1 - len(distractors)))
    order = rng.choice(_orders(cfg.n_options, split))
    return _question(kb, entity, attribute, phrasing, distractors, order, extra)


def generate_level(seed: int | str, cfg: SyspromptConfig = SyspromptConfig(),
                   split: str = "train") -> Question:
    """One question from `seed`: about the fixed KB `cfg.kb`, or a fresh KB if it is None
    (with `min_entities`, of a random size). `split="test"` uses the held-out phrasings."""
    rng = random.Random(f"sysprompt-q-{seed}")
    n = cfg.n_entities
    if cfg.kb is None and cfg.min_entities is not None:
        n = rng.randint(cfg.min_entities, cfg.n_entities)
    kb = knowledge_base(cfg.kb if cfg.kb is not None else f"r-{seed}", cfg, n)
    return _draw(rng, kb, cfg, split)


def follow_up(q: Question, seed: int | str, cfg: SyspromptConfig) -> Question:
    """Another training question about `q`'s knowledge base (teacher SFT packs several)."""
    return _draw(random.Random(f"sysprompt-f-{seed}"), q.kb, cfg, "train")


def all_test_questions(cfg: SyspromptConfig, seed: int = 0) -> list[Question]:
    """Every distinct held-out question about the fixed KB, in a seeded random order."""
    if cfg.kb is None:
        raise UsageError("a random-KB task has no finite held-out set; set kb")
    kb = knowledge_base(cfg.kb, cfg)
    out = []
    for e, a, ph in itertools.product(range(cfg.n_entities), range(cfg.n_attributes),
                                      PHRASINGS):
        others = [x for x in range(cfg.n_entities) if x != e]
        for d in itertools.combinations(others, cfg.n_options - 1):
            for order in _orders(cfg.n_options, "test"):
                out.append(_question(kb, e, a, ph, d, order))
    random.Random(f"sysprompt-test-{seed}").shuffle(out)
    return out


def render_compact(q: Question) -> str:
    """Options value-first, `q:A f:B d:C h:D`, then the question. With the `table` layout the
    question comes first (`lake of K?`, then the options; the task adds the `>` cue); with
    `facts` / `rows` the prompt ends on the key the answer is bound to (`lake of K`, no cue):
    the last token is then the same token that ends the fact in the KB."""
    options = " ".join(f"{o}:{LETTERS[i]}" for i, o in enumerate(q.options))
    if q.kb.layout == "table":
        return q.text + "\n" + options
    return options + "\n" + q.text


def cue(q: Question) -> str:
    """What the compact prompt appends after the question (the table layout's `>` cue)."""
    return "\n>" if q.kb.layout == "table" else ""


def render_chat(q: Question) -> str:
    """The question as a chat user turn, with the OPCD-style answer instruction."""
    opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(q.options))
    return (f"Question: {q.text}\nOptions:\n{opts}\n"
            "Answer with the option letter inside <answer></answer> tags.")


def system_prompt(q: Question) -> str:
    return q.kb.render()


def compact_target(q: Question, cfg: SyspromptConfig) -> str:
    return {"value": q.value, "letter": q.answer,
            "value_letter": f"{q.value}:{q.answer}"}[cfg.response]


def parse_compact(response: str, q: Question, cfg: SyspromptConfig) -> str | None:
    """The option letter a compact response chose: by its text (`value`), its letter
    (`letter`), or the letter after `value:` (`value_letter`); None if it names no option."""
    text = response.strip()
    if cfg.response == "value":
        return LETTERS[q.options.index(text)] if text in q.options else None
    if cfg.response == "value_letter":
        if text.count(":") != 1:
            return None
        text = text.split(":")[1]
    return parse_answer(text, LETTERS[: len(q.options)], tagged=False)



@dataclass(frozen=True)
class SyspromptTask(QATask):
    """A synthetic knowledge base in the system prompt; the unit is the fact asked about (one
    (entity, attribute) cell is asked in many phrasings and option orders, not independent)."""

    unit_name = "fact"

    def unit(self, level) -> str:
        return f"{level.entity}.{level.attribute}"

    def prompt(self, level, context: str | None = None) -> str:
        """As for games, except that a compact question supplies its own cue (none when the
        prompt ends on the key the answer is bound to)."""
        if self.chat is not None or self.fmt != "compact":
            return super().prompt(level, context)
        x = self.render(level) + cue(level)
        return x if context is None else f"{context}\n{x}"

    def _system_prompt(self, level) -> str:
        return system_prompt(level)

    def for_teacher(self, min_entities: int | None = None, **training) -> SyspromptTask:
        """The teacher reads a fresh random knowledge base on every question (it learns to read
        facts, not to remember one); the recorded `kb` is the one distillation internalizes.
        `min_entities`: training KBs have min..n_entities entities (a curriculum)."""
        return replace(self, config=replace(self.config, kb=None, min_entities=min_entities))

    def control_context(self, levels: list, i: int, kind: str) -> str:
        """The same knowledge base with each attribute's values rotated across the entities
        (every fact wrong, same layout and length)."""
        self.context(levels[i], kind)  # the kind check
        kb = levels[i].kb
        return replace(kb, values=tuple(zip(*[rotated(col) for col in zip(*kb.values)]))
                       ).render()

    def control_note(self, levels: list, kind: str) -> str:
        return ("the item's knowledge base with each attribute's values rotated across the "
                "entities (every fact wrong, same layout and length)")

    def _allowed(self, level) -> str:
        return LETTERS[: len(level.options)]

    def _compact_target(self, level) -> str:
        return compact_target(level, self.config)

    def parse(self, response: str, level=None) -> str | None:
        if self.fmt == "compact":
            return parse_compact(response, level, self.config)
        return super().parse(response, level)


register(TaskSpec("sysprompt", SyspromptConfig, sys.modules[__name__], SyspromptTask, "system"))
