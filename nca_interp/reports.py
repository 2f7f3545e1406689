"""Typed reports: what each analysis writes, declared once, with a version.

A report is a `Report` (or the subclass its analysis registers): the config it ran with, the
task, the context kind, the identity of every run it measured (`runs`, a `RunRecord` per key)
and `results`, one entry per checkpoint or run, each an instance of the analysis's entry class
(`ContextReturn`, `LayerSim`, ...); an analysis's own top-level fields (layer_sim's `layers`,
param_delta's `comparison`) are fields of its report class. Every field carries its meaning
(`doc`), which `describe` prints, so the documentation is the declaration and cannot drift from
the keys: building a report with a key its class does not declare is refused.

    report = analysis.load("figures/sokoban/layer_sim.json")  # any version this package wrote
    report.results["sokoban_nca_s0"].cos                      # per-layer cosine, typed
    report.to_json()                                          # the file's dict, this VERSION

One vocabulary: an item (a level, a question) is correct or not, with c or without, whatever
the task calls a success (`metric`: "win" for games, "accuracy" for questions, used only to
label columns): `correct_no_c`, `correct_c`, `n_correct_no_c`, and `correct_no_c` /
`correct_c` per item.

Versions: 0, before the shared shape (`reports` / `per_checkpoint` for `results`, no `runs`);
1, the shared shape without a version; 2, with `version` and `analysis`; 3 (this), one
vocabulary (`win_*` / `won_*` / `n_right_no_c` before). `from_json` brings every earlier one to
3 (`upgrade`: keys renamed, the numbers not touched); a file from a newer version is refused.
Which class a file is read as comes from the analysis registry (`nca_interp.analysis.load`,
`AnalysisSpec.report`); this module knows no registry, so it imports nothing above it.

Reports and entries also read as mappings (`report["results"]`, `entry["cos"]`, `"control" in
entry`), which yield the fields that are set; new code reads attributes. This module imports
neither torch nor an analysis, so reading results is cheap.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from nca_interp.errors import UsageError

__all__ = ["VERSION", "ContextReturn", "ContextReturnReport", "Fields", "GradAlign",
           "GradAlignReport", "LayerSim", "LayerSimReport", "Lens", "LensReport", "ParamDelta",
           "ParamDeltaReport", "Patching", "PatchingReport", "Report", "ReportError",
           "RunRecord", "Trajectory", "TrajectoryReport", "VOCABULARY", "as_report",
           "check_complete", "describe", "label", "layer_head_shape", "null_role", "read_derived",
           "typed", "upgrade", "vocabulary"]

VERSION = 3
_LEGACY_RESULTS = ("reports", "per_checkpoint")
# version 3's one vocabulary: the keys before it, at any depth of a results entry (a control's
# "win" only inside its `control`)
VOCABULARY = {"win_no_c": "correct_no_c", "win_c": "correct_c", "n_right_no_c": "n_correct_no_c",
              "won_no_c": "correct_no_c", "won_c": "correct_c"}


class ReportError(UsageError):
    """A report file or dict that does not match its declared class."""


def doc(text: str, default: Any = None, key: str | None = None) -> Any:
    """A field with its meaning; optional unless a default is given (None: not set). `key`:
    its JSON key where that is no attribute name (`global`) or would hide a mapping method
    (`items`)."""
    return field(default=default, metadata={"doc": text, "key": key})


def need(text: str) -> Any:
    """A field every entry has."""
    return field(metadata={"doc": text})


@functools.cache
def _class_keys(cls: type) -> dict[str, dataclasses.Field]:
    return {f.metadata.get("key") or f.name: f for f in dataclasses.fields(cls)
            if f.name != "extra"}


def _keys(obj) -> dict[str, dataclasses.Field]:
    """JSON key -> field, `extra` left out (per class, computed once)."""
    return _class_keys(obj if isinstance(obj, type) else type(obj))


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


F = TypeVar("F", bound="Fields")
R = TypeVar("R", bound="Report")


class Fields(Mapping):
    """A dataclass that also reads as a mapping of the fields that are set (a required field
    always; an optional one when it was given, even as None, or holds a value), and writes JSON
    as that mapping: a file read and written again is unchanged. Subclasses are declared
    `eq=False`, so equality is the mapping's (an entry equals the dict of its file)."""

    _given: frozenset[str]  # the fields a file gave (set by `from_json` only)
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field]]  # each subclass is a dataclass

    def _set(self) -> list[str]:
        given = self.__dict__.get("_given")  # None: built directly, not read
        out = [k for k, f in _keys(self).items()
               if getattr(self, f.name) is not None
               or (f.name in given if given is not None else _required(f))]
        return out + list(getattr(self, "extra", None) or {})

    def __getitem__(self, key: str) -> Any:
        f = _keys(self).get(key)
        if f is None:
            extra = getattr(self, "extra", None)
            if extra and key in extra:
                return extra[key]
            raise KeyError(key)
        value = getattr(self, f.name)
        if value is None:  # set only if given (read) or required (built)
            given = self.__dict__.get("_given")
            if not (f.name in given if given is not None else _required(f)):
                raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._set())

    def __len__(self) -> int:
        return len(self._set())

    def __setitem__(self, key: str, value: Any) -> None:
        f = _keys(self).get(key)
        if f is not None:
            setattr(self, f.name, value)
        elif isinstance(extra := getattr(self, "extra", None), dict):
            extra[key] = value
        else:
            raise ReportError(f"{type(self).__name__} has no field {key!r}; its fields: "
                              f"{', '.join(_keys(self))} (declare it in nca_interp.reports)")

    def to_json(self) -> dict:
        return {k: _plain(self[k]) for k in self}

    @classmethod
    def from_json(cls: type[F], d: Mapping, where: str = "", complete: bool = False) -> F:
        """The instance holding `d`'s keys. A key it does not declare is refused in one line;
        so is a required one missing when `complete` (what an analysis writes), while a file
        read may lack some (an older or hand-made one): those read as absent."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, Mapping):
            raise ReportError(f"{where or cls.__name__}: expected a mapping, got "
                              f"{type(d).__name__}")
        keys = _keys(cls)
        unknown = [k for k in d if k not in keys]
        if unknown and not getattr(cls, "OPEN", False):
            raise ReportError(f"{where or cls.__name__}: {', '.join(map(repr, unknown))} "
                              f"{'is' if len(unknown) == 1 else 'are'} not declared by "
                              f"{cls.__name__} (fields: {', '.join(keys)}); declare "
                              "new keys in nca_interp.reports")
        missing = [f.name for k, f in keys.items() if _required(f) and k not in d]
        if missing and complete:
            raise ReportError(f"{where or cls.__name__}: {cls.__name__} needs "
                              f"{', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
                              " missing")
        kw = {keys[k].name: v for k, v in d.items() if k in keys}
        if getattr(cls, "OPEN", False):
            kw["extra"] = {k: v for k, v in d.items() if k in unknown}
        given = frozenset(kw)
        if issubclass(cls, Report):  # entries checked with `complete` before the report
            kw.update(cls._typed(kw.get("runs"), kw.get("results"), complete, where))
        out = cls(**{**dict.fromkeys(missing), **kw})
        out._given = given
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Fields):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(eq=False)
class RunRecord(Fields):
    """Who a results entry belongs to (`nca_interp.identity.RunId`'s fields, its folder)."""

    name: str = need("the run's name (its folder name)")
    setting: str | None = doc("the pipeline setting (folder name less _<method>_s<seed>)")
    method: str | None = doc("opd, nca or opdsized; None: not a student (teacher, base, init)")
    seed: int | None = doc("the distillation seed")
    beta: float | None = doc("NCA's weight as trained (beta_effective)")
    estimator: str | None = doc("the KL estimator the run was trained with")
    step: int | None = doc("the training step of a step checkpoint")
    path: str | None = doc("the folder measured")
    prompt_format: str | None = doc("'chat template' or 'plain': how its prompts were written")


@dataclass(kw_only=True, eq=False)
class Report(Fields):
    """What every analysis writes. An analysis with its own top-level fields subclasses it
    and names its entry class (`ENTRY`); a report of an analysis without a declared class
    keeps its own keys in `extra` and its entries as they are."""

    ANALYSIS: ClassVar[str] = ""
    ENTRY: ClassVar[type[Fields] | None] = None
    OPEN: ClassVar[bool] = True  # undeclared top-level keys kept in `extra` (only here)

    config: dict = need("the config the analysis ran with (its command's fields, as a dict)")
    task: str | None = need("the task's name")
    context: str | None = need("the context kind c (None where the analysis has none)")
    runs: dict = need("a RunRecord per key of results")
    results: dict = need("one entry per checkpoint or run, by label")
    data: dict | None = doc("what was fed in: task options, data files' sha256, units, the "
                            "prompts' sha256 (analysis.data_record)")
    figures: dict | None = doc("the sha256 of every figure file written with the report")
    analysis: str | None = doc("the registered analysis that wrote it")
    environment: dict | None = doc("where it was computed (analysis.environment): the "
                                   "precision --precision resolved to (auto is bf16 on a CPU "
                                   "with native bf16, fp32 elsewhere), the device, whether the "
                                   "CPU has native bf16, torch threads, and the versions of "
                                   "Python, torch, transformers, TransformerLens and this "
                                   "package; reports before it lack it")
    version: int = doc("the report format's version (reports.VERSION)", VERSION)
    extra: dict | None = None

    def __post_init__(self) -> None:
        if self.OPEN and self.extra is None:
            self.extra = {}
        self.analysis = self.analysis or self.ANALYSIS or None
        typed = self._typed(self.runs, self.results, False, "report")
        self.runs, self.results = typed["runs"], typed["results"]

    @classmethod
    def _typed(cls, runs, results, complete: bool, where: str) -> dict:
        """Runs and entries as their classes (checked as `from_json` checks)."""
        for name, value in (("runs", runs), ("results", results)):
            if value is not None and not isinstance(value, Mapping):
                raise ReportError(f"{where}: {name} is {type(value).__name__}, not a mapping by "
                                  "label; the file is damaged: restore it (git checkout, or its "
                                  "own command)")
        runs = {k: RunRecord.from_json(v, f"{where} runs[{k!r}]", complete)
                for k, v in (runs or {}).items()}
        if cls.ENTRY is not None:
            results = {k: cls.ENTRY.from_json(v, f"{where} results[{k!r}]", complete)
                       for k, v in (results or {}).items()}
        return {"runs": runs, "results": results if results is not None else {}}

    @classmethod
    def from_json(cls: type[R], d: Mapping, where: str = "", complete: bool = False) -> R:
        if type(d) is cls:
            return d
        d = dict(d.to_json() if isinstance(d, Fields) else d)
        version = d.get("version", 1)
        if not isinstance(version, int) or version > VERSION:
            raise ReportError(f"{where or 'report'}: format version {version!r}, newer than "
                              f"this package reads ({VERSION}); upgrade nca_interp")
        return super().from_json(d, where, complete)


def describe(cls: type[Fields]) -> str:
    """Each field of a report or entry class with its meaning, one per line: its JSON key, and
    the attribute where that differs (`items` is read as `entry.items_`, `global` as
    `entry.global_`: the mapping's method and Python's keyword keep those names)."""
    return "\n".join(
        f"  {k + ('' if k == f.name else f' (.{f.name})'):<22} {f.metadata.get('doc', '')}"
        for k, f in _keys(cls).items())


# --- the built-in analyses' entries and reports -------------------------------------------

@dataclass(eq=False)
class ContextReturn(Fields):
    """One checkpoint's context return (nca_interp.evaluate): the same held-out items with and
    without c, paired; intervals are 95% cluster bootstraps over `unit`."""

    n: int = need("items played")
    unit: str = need("what the bootstrap resamples (level, fact, item)")
    n_units: int = need("independent units among the items")
    metric: str = need("what being correct is called for the task: 'win' (games) or "
                       "'accuracy' (questions); it labels columns (win_c, acc_c)")
    len_no_c: float = need("mean response tokens without c (end of response included)")
    len_c: float = need("mean response tokens with c")
    rel_len: float = need("len_c / len_no_c - 1 over all items")
    ci95: dict = need("the 95% interval of each rate, by its key")
    n_correct_no_c: int | None = doc("items correct without c (where harm is measured)")
    correct_no_c: float | None = doc("share of items correct without c")
    correct_c: float | None = doc("share of items correct with c")
    harm: float | None = doc("P(wrong with c | correct without c): the paper's harm rate")
    help: float | None = doc("P(correct with c | wrong without c)")
    harm_joint: float | None = doc("P(correct without c and wrong with c)")
    help_joint: float | None = doc("P(wrong without c and correct with c)")
    both: float | None = doc("P(correct both ways)")
    delta_c: float | None = doc("correct_c - correct_no_c")
    rel_len_both: float | None = doc("len_c / len_no_c - 1 on the items correct both ways")
    regime: str | None = doc("A (c hurts), B (c still needed), C (neither): delta_c's interval "
                             "by the few-clusters rule (nca_interp.regimes.regime: the CR1 t "
                             "interval of the items under 30 units; reports written before "
                             "read ci95's percentile bootstrap, and readers re-read them)")
    parse_fail_no_c: float | None = doc("share of responses without c that did not parse")
    parse_fail_c: float | None = doc("share of responses with c that did not parse")
    hit_budget_no_c: float | None = doc("share of responses without c that hit max_new")
    hit_budget_c: float | None = doc("share of responses with c that hit max_new")
    max_new: int | None = doc("the response token budget")
    items_: dict | None = doc("per item: its unit, correct_no_c / correct_c (0/1), "
                              "length_no_c / length_c (tokens), with --control "
                              "correct_control and length_control; own data's responses "
                              "(with --control also c' itself, context_control, and "
                              "response_control)", key="items")
    control: dict | None = doc("with a wrong context c' of c's form: correct (its rate) and "
                               "harm, reads_c (correct_c - correct_c') with its interval, and "
                               "what c' was (evaluate.control_record): c_prime, where it came "
                               "from in a line; c_prime_source, default (the task's draw), "
                               "field (your per-item control) or file (your control_file); "
                               "c_prime_file, that file's path and sha256; c_prime_examples, "
                               "the first items' c'")
    scored: bool | None = doc("False: own data without a scorer (lengths and KLs only)")
    note: str | None = doc("what an unscored report lacks")
    kl_views: float | None = doc("unscored: KL between the views on the responses, per token")
    kl_views_ci95: list | None = doc("its interval")
    kl_views_control: float | None = doc("unscored: the same with the control context")


@dataclass(kw_only=True, eq=False)
class ContextReturnReport(Report):
    ANALYSIS: ClassVar[str] = "evaluate"
    OPEN: ClassVar[bool] = False
    ENTRY: ClassVar[type[Fields]] = ContextReturn


@dataclass(eq=False)
class Trajectory(Fields):
    """One run's context return at every saved checkpoint (nca_interp.trajectory)."""

    run: str = need("the run folder")
    teacher: str | None = need("the run's teacher")
    context: str | None = need("the context kind")
    task: str | None = need("the task")
    steps: list = need("per checkpoint: step, correct_no_c, correct_c, harm, help, delta_c, "
                       "regime, KLs on the student's samples (kl_opd, kl_ctx, kl_nca), drift, "
                       "ci95; with --control reads_c, and for own data response_control "
                       "(the answers with c', per item)")
    identity: dict | None = doc("method, seed and beta from the run config")
    control: dict | None = doc("with --control, what c' was (evaluate.control_record: c_prime, "
                               "c_prime_source, c_prime_file with its sha256, "
                               "c_prime_examples)")


@dataclass(kw_only=True, eq=False)
class TrajectoryReport(Report):
    ANALYSIS: ClassVar[str] = "trajectory"
    OPEN: ClassVar[bool] = False
    ENTRY: ClassVar[type[Fields]] = Trajectory


@dataclass(eq=False)
class LayerSim(Fields):
    """One checkpoint's two views compared layer by layer (nca_interp.layer_sim); lists run
    over `layers` (embed, then each block)."""

    cos: list = need("mean over examples of the mean token cosine between the views")
    cos_std: list = need("its std over examples")
    cos_centred: list = need("cos after subtracting the layer's pooled mean hidden state")
    cos_centred_view: list = need("cos with each view centred on its own mean")
    offset_share: list = need("the between-view offset's share of the centred variance")
    cka: list = need("linear CKA between the views' token matrices")
    ctx_attn: list = need("attention mass on c's tokens in the [c, x] view, mean over heads")
    ctx_attn_ratio: list = need("per layer x head: that mass over c's share of the keys "
                                "(1 = uniform)")
    ctx_attn_ratio_layer: list = need("ctx_attn_ratio averaged over heads")
    n_examples: int = need("items compared")
    n_positions: int = need("token positions compared")
    mean_response_tokens: float = need("mean length of the responses teacher-forced")
    cos_se: list | None = doc("standard error of cos, the examples clustered by the task's "
                              "independent unit (a level; a fact asked several ways); older "
                              "runs lack it and read cos_std / sqrt(n_examples)")
    n_units: int | None = doc("independent units among the examples (the task's unit)")
    cos_other: list | None = doc("the floor: the same statistic between different items "
                                "(paired as the report's `other_pairs` says)")
    cka_debiased: list | None = doc("CKA with the unbiased HSIC estimator")
    responses: list | None = doc("the responses teacher-forced, as text")


@dataclass(kw_only=True, eq=False)
class LayerSimReport(Report):
    ANALYSIS: ClassVar[str] = "layer_sim"
    OPEN: ClassVar[bool] = False
    ENTRY: ClassVar[type[Fields]] = LayerSim

    at: str = need("the positions compared: response, generating or prompt")
    responses: str = need("whose responses were teacher-forced: reference, base or own")
    responses_from: str = need("those responses in words")
    layers: list = need("the layer labels of every per-layer list (embed, 0, 1, ...)")
    checkpoints: list = need("the checkpoint folders compared, in order")
    other_pairs: str | None = doc("how cos_other pairs items: the next item of another unit "
                                  "(absent: the next item, whatever its unit, as reports before "
                                  "session 35 did)")
    beside: dict | None = doc("made with --beside: the report placed beside (path, sha256), "
                              "its entries carried unchanged, the entry recomputed to check "
                              "them (max_abs_diff, atol) and, per recomputed baseline, the "
                              "layers where it differs from the report's")


@dataclass(eq=False)
class GradAlign(Fields):
    """One checkpoint's gradient alignment (nca_interp.grad_align)."""

    modules: dict = need("per layer x module: norms, self angles, snr, angle_deg and "
                         "angle_xfit_deg between the terms")
    tokens: dict = need("the response tokens the batch's terms were taken on, by half")
    global_: dict | None = doc("the same over all parameters", key="global")
    responses: list | None = doc("the batch's responses, as text")


@dataclass(kw_only=True, eq=False)
class GradAlignReport(Report):
    ANALYSIS: ClassVar[str] = "grad_align"
    OPEN: ClassVar[bool] = False
    ENTRY: ClassVar[type[Fields]] = GradAlign

    batch: int = need("prompts per checkpoint (split into two independent halves)")
    steps: list | None = doc("the training step of each checkpoint, in order")


@dataclass(eq=False)
class ParamDelta(Fields):
    """One checkpoint's parameter delta from the common initial one (nca_interp.param_delta)."""

    rel: dict = need("per tensor: ||W - W0|| / ||W0||")
    adam_norm: dict = need("per tensor: ||W - W0|| over Adam's budget (sum of lr x sqrt(n))")
    share: dict = need("per tensor: its share of the total squared delta")
    per_module: dict = need("per module type (q_proj, ...): root of summed squares / ||W0||")
    per_module_adam: dict = need("the same against Adam's budget")
    per_layer: dict = need("per layer: root of summed squares / ||W0||")
    per_layer_adam: dict = need("the same against Adam's budget")
    global_rel: float = need("the whole delta over ||W0||")
    global_adam: float | None = need("the whole delta over Adam's budget")
    global_sq: float = need("the whole squared delta")
    lr_budget: float | None = need("the summed learning rate the budget is built on")


@dataclass(kw_only=True, eq=False)
class ParamDeltaReport(Report):
    ANALYSIS: ClassVar[str] = "param_delta"
    OPEN: ClassVar[bool] = False
    ENTRY: ClassVar[type[Fields]] = ParamDelta

    init: str = need("the common initial checkpoint")
    n_layers: int = need("layers of the model")
    rows: str = need("embedding rows counted: all, or the task's")
    n_task_rows: int | None = need("the task's rows, where counted")
    all_pairs: dict | None = doc("with two or more checkpoints: cos(dA, dB) for every pair, "
                                 "per module")
    comparison: dict | None = doc("with two or more: the first pair (OPD, NCA, or --pair): cos "
                                  "and the NCA-specific delta")
    control: dict | None = doc("--control's pair: the seed-to-seed baseline of cos")


@dataclass(eq=False)
class Patching(Fields):
    """One checkpoint's account of where c's effect is carried (nca_interp.patching)."""

    checkpoint: str = need("the checkpoint patched")
    task: str = need("the task")
    context: str = need("the context kind")
    kind: str | None = doc("harm or help: which cases were patched")
    scope: str | None = doc("what was patched: groups, layers or heads")
    counts: dict | None = doc("cases found and used")
    n_layers: int | None = doc("layers")
    n_heads: int | None = doc("heads per layer")
    ablate: str | None = doc("how a component was ablated (mean or zero)")
    data: dict | None = doc("what was fed in")
    control: dict | None = doc("the null: random components of the same size")
    cases: list | None = doc("each case: its unit, right and wrong answers, the first token "
                             "they differ at")
    harm: dict | None = doc("harm cases' summary")
    help: dict | None = doc("help cases' summary")
    forward: dict | None = doc("patching the no-c view's activations into the c view (exact "
                               "effects, None where --method attribution left a node unpatched); "
                               "`methods`: per family its method, attribution, candidates and "
                               "agreement (Spearman, top-k overlap, misses)")
    reverse: dict | None = doc("the c view's activations into the no-c view (as forward)")
    ablation: dict | None = doc("each head's reading of c removed (exact effects; with "
                                "--method attribution also method, attribution, candidates, "
                                "agreement)")
    heads: dict | None = doc("per head effects")
    lens: dict | None = doc("logit lens: the right answer's margin per layer in each view")
    cost: dict | None = doc("method, forward passes (patched, ablation, attribution), "
                            "attribution backwards, generations and seconds spent")
    note: str | None = doc("why a part was not measured")


@dataclass(kw_only=True, eq=False)
class PatchingReport(Report):
    ANALYSIS: ClassVar[str] = "patching"
    OPEN: ClassVar[bool] = False
    ENTRY: ClassVar[type[Fields]] = Patching


# --- reading and upgrading -----------------------------------------------------------------

def vocabulary(tree: Any, control: bool = False) -> Any:
    """`tree` with the keys of version 3's vocabulary (`VOCABULARY`; "win" inside a `control`)
    renamed at every depth, in place of order; values untouched. Also for files that are no
    report (the pipeline's context_return_summary.json)."""
    if isinstance(tree, dict):
        names = {**VOCABULARY, "win": "correct"} if control else VOCABULARY
        return {names.get(k, k): vocabulary(v, control or k == "control")
                for k, v in tree.items()}
    if isinstance(tree, list) and tree and isinstance(tree[0], (dict, list)):
        return [vocabulary(v, control) for v in tree]  # lists of numbers are left as they are
    return tree


def label(key: str, metric: str = "win") -> str:
    """A key as a column is headed: `correct_*` is `win_*` for a game and `acc_*` for questions
    (`metric`), so tables read in the task's words; other keys as they are."""
    if key == "correct" or key.startswith("correct_"):
        return ("acc" if metric == "accuracy" else "win") + key[len("correct"):]
    return key


def null_role(pairs) -> str:
    """What a null is called beside the measured values it is read against, (null, measured)
    per place (a layer, a checkpoint, a pair of loss terms): "floor" only where it sits below
    every one of them; else "reference" (#70 item 7: a null at or above a measured value
    bounds nothing from below, as random init's cosine above a trained model's or a term's
    self-angle above a between-term angle). Pairs missing either side are left out; none
    left: "reference"."""
    kept = [(n, m) for n, m in pairs if n is not None and m is not None]
    return "floor" if kept and all(n < m for n, m in kept) else "reference"



def as_report(d: Mapping, cls: type[F]) -> F:
    """`d` as `cls`, a report class or an entry class: kept when it is one, else read (a
    report upgraded from its version first; an undeclared key refused, and a required one
    missing). What a figure, table or `show` calls at its door, so a report a user built as
    a dict draws too, or is refused in one line naming what it lacks."""
    if isinstance(d, cls):
        return d
    return cls.from_json(upgrade(d) if issubclass(cls, Report) else d, cls.__name__,
                         complete=True)


def typed(entries: Mapping[str, Any], cls: type[F]) -> dict[str, F]:
    """`{label: entry}` with every entry as `cls`: an entry already typed is kept, a dict (as an
    analysis computes it or a user builds it) is read as `cls` (an undeclared key refused).
    What a reader calls at its door, so it reads attributes whatever it was handed."""
    return {k: cls.from_json(v, str(k)) for k, v in entries.items()}


# a declared field's type, as a file's JSON value holds it (a float field may hold an int)
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "dict": (dict,),
    "list": (list,)}


def _fits(value: Any, declared: Any) -> bool:
    """Whether `value` is of the declared type (`list`, `int | None`, ...); a type this check
    does not know (a plug-in's own) is not checked."""
    text = declared if isinstance(declared, str) else \
        getattr(declared, "__name__", None) or str(declared)
    for name in text.replace(" ", "").split("|"):
        if name == "None":
            if value is None:
                return True
            continue
        kinds = _JSON_TYPES.get(name)
        if kinds is None or (isinstance(value, kinds)
                             and (name == "bool" or not isinstance(value, bool))):
            return True
    return False


def check_complete(report: Report, where: str) -> None:
    """Refuse, in one line naming `where` and the field, a report read from a file that is not
    what its analysis writes: a required field missing (at the top, in `runs` or an entry), a
    field given that is not of its declared type, or no results entry. What a reader that
    draws every field calls at its door (`analysis.load(..., complete=True)`), so a
    hand-edited report is refused before anything is written, not where a figure fails on it
    (the tenth probe's T-E: no `layers`, or `"results": []`)."""
    def check(obj: Fields, prefix: str) -> None:
        given = obj.__dict__.get("_given")
        for key, f in _keys(obj).items():
            value = getattr(obj, f.name)
            if (f.name not in given) if given is not None else value is None:
                if _required(f):
                    raise ReportError(f"{where} is damaged: its {prefix}{key} is missing; "
                                      "restore it (git checkout, or its own command)")
                continue
            if not _fits(value, f.type):
                raise ReportError(f"{where} is damaged: its {prefix}{key} is "
                                  f"{type(value).__name__} {str(value)[:40]!r}, not {f.type}; "
                                  "restore it (git checkout, or its own command)")

    check(report, "")
    if not report.results:
        raise ReportError(f"{where} is damaged: it has no results entry; restore it (git "
                          "checkout, or its own command)")
    for name, group in (("runs", report.runs), ("results", report.results)):
        for key, entry in group.items():
            if isinstance(entry, Fields):  # a plug-in's entries without a class: as they are
                check(entry, f"{name}[{key!r}].")
    for key, entry in report.results.items():
        _check_sizes(entry, f"{where} is damaged: its results[{key!r}]")
        _check_ranges(entry, f"{where} is damaged: its results[{key!r}]")
        ci = entry.get("ci95") if isinstance(entry, dict) else getattr(entry, "ci95", None)
        for stat, value in (ci.items() if isinstance(ci, dict) else ()):
            if not _interval_or_list(value):
                raise ReportError(f"{where} is damaged: its results[{key!r}].ci95.{stat} is "
                                  f"{str(value)[:40]!r}, not an interval [lo, hi] (or a list "
                                  "of them); restore it (git checkout, or its own command)")


# what a value can be by its definition (shares and probabilities in [0, 1], cosines in [-1, 1],
# counts at least 0), for the fields of any analysis's entry that carry one of these names: a
# report holding another was drawn into its pages without a word (probe 11 U-R)
RANGES = {**{k: (0.0, 1.0) for k in ("correct_no_c", "correct_c", "harm", "help", "harm_joint",
                                      "help_joint", "both", "cka", "offset_share", "ctx_attn")},
          **{k: (-1.0, 1.0) for k in ("cos", "cos_other", "cos_centred", "cos_centred_view",
                                       "delta_c")},
          **{k: (0.0, math.inf) for k in ("n", "n_units", "n_correct_no_c", "n_examples",
                                           "n_positions", "cos_std")}}


def _check_ranges(entry, prefix: str) -> None:
    """Each field of `RANGES` an entry holds (a number, or a list of them per layer) lies in
    its range and is finite, else one line naming it."""
    get = entry.get if isinstance(entry, dict) else lambda k, d=None: getattr(entry, k, d)
    for name, (lo, hi) in RANGES.items():
        value = get(name, None)
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, (dict, list)) for v in values):
            continue  # another analysis's field of that name (patching's harm: its cases)
        bad = next((v for v in values if v is not None and not (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and lo - 1e-6 <= v <= hi + 1e-6)), None)
        if bad is not None:
            raise ReportError(f"{prefix}.{name} holds {str(bad)[:40]!r}, which no analysis "
                              f"writes (a finite number in [{lo}, {hi}]); restore it (git "
                              "checkout, or its own command)")


def _interval_or_list(value) -> bool:
    """[lo, hi] (numbers or null), or a list of such (per third, part, layer ...): what every
    analysis writes under `ci95` (probe 11 U-L: one number failed as "not enough values to
    unpack" in a figure, naming no file)."""
    def bound(v) -> bool:
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))

    if isinstance(value, list) and len(value) == 2 and all(bound(v) for v in value):
        return True
    return isinstance(value, list) and all(_interval_or_list(v) for v in value)


def layer_head_shape(entry) -> tuple[int | None, int | None]:
    """The (layers, heads) a patching entry's arrays hold (its residual and MLP sweeps, its
    head tables), None where it holds none: what its figures are drawn over, whatever its
    `n_layers` / `n_heads` say."""
    get = entry.get if isinstance(entry, dict) else lambda k, d=None: getattr(entry, k, d)
    layers, heads = None, None
    for sweep in (get("forward"), get("reverse")):
        if not isinstance(sweep, dict):
            continue
        for table in (sweep.get("mlp"), *(sweep.get("resid_groups") or {}).values()):
            if isinstance(table, dict) and isinstance(table.get("mean"), list):
                layers = len(table["mean"])
        for table in (sweep.get("heads"),):
            if isinstance(table, dict) and isinstance(table.get("mean"), list) and table["mean"]:
                layers, heads = len(table["mean"]), len(table["mean"][0])
    abl = get("ablation")
    if isinstance(abl, dict) and isinstance(abl.get("mean"), list) and abl["mean"] \
            and isinstance(abl["mean"][0], list):
        layers, heads = len(abl["mean"]), len(abl["mean"][0])
    return layers, heads


def _check_sizes(entry, prefix: str) -> None:
    """A patching entry's `n_layers` / `n_heads` are what its arrays hold (probe 11 H-D: a
    figure sized by an `n_layers` of 10^9 asked for 21 GB): one line naming the field."""
    layers, heads = layer_head_shape(entry)
    for name, held in (("n_layers", layers), ("n_heads", heads)):
        said = getattr(entry, name, None) if not isinstance(entry, dict) else entry.get(name)
        if held is not None and isinstance(said, int) and said != held:
            raise ReportError(f"{prefix}.{name} is {said}, but its arrays hold {held}; restore "
                              "it (git checkout, or its own command)")


def read_derived(path: str | Path) -> Any:
    """A file the pipeline derives from reports that is no report itself (a setting's
    context_return_summary.json, harm_drift.json) in this version's vocabulary."""
    from nca_interp.fsio import read_json

    return vocabulary(read_json(path))


def upgrade(d: Mapping) -> dict:
    """A report dict of any earlier version in this version's shape (numbers untouched):
    `results` for `reports` / `per_checkpoint`, task, context and runs filled from its config
    and entries (0); `version` (1); the vocabulary (`vocabulary`, before 3)."""
    from nca_interp import identity

    r = dict(d)
    version = r.get("version", 1)
    if version >= VERSION:
        return r
    if version < 3 and isinstance(r.get("results"), dict):
        r["results"] = vocabulary(r["results"])
    if version >= 2:
        r["version"] = VERSION
        return r
    for old in _LEGACY_RESULTS:
        if old in r and "results" not in r:
            r["results"] = r.pop(old)
    results = r.get("results", {})
    results = results if isinstance(results, dict) else {}
    first: Any = next(iter(results.values()), {})
    first = first if isinstance(first, dict) else {}
    cfg = r.get("config", {}) or {}
    r["task"] = r.get("task", cfg.get("task") or first.get("task"))
    r["context"] = r.get("context", cfg.get("context") or first.get("context"))
    named = [*(cfg.get("ckpt") or []), *(cfg.get("runs") or []), *(r.get("checkpoints") or [])]
    folders = {Path(f).name: str(f) for f in named}
    if not r.get("runs"):
        r["runs"] = {k: _legacy_identity(k, v, folders, identity) for k, v in results.items()}
    r["config"], r["results"], r["version"] = cfg, results, VERSION
    return r


def _legacy_identity(key: str, entry, folders: dict[str, str], identity) -> dict:
    """An entry's identity in a file without `runs`: from its run folder's name (the key, the
    folder the config names by that key, or the entry's run or checkpoint; `<run>/checkpoints/
    step_N` is run `<run>` at step N), with the method, seed and beta its `identity` records."""
    entry = entry if isinstance(entry, dict) else {}
    path = key if "/" in key else folders.get(key) or entry.get("run") or entry.get("checkpoint")
    p = Path(path) if path else Path(key)
    step = int(p.name[5:]) if p.name.startswith("step_") and p.name[5:].isdigit() else None
    run = p.parent.parent if step is not None else p
    rid = dataclasses.replace(identity.legacy_of_name(run.name), step=step)
    own = entry.get("identity")
    if isinstance(own, dict):
        rid = dataclasses.replace(rid, **{k: v for k, v in own.items()
                                          if k in ("method", "seed", "beta") and v is not None})
    return {**rid.to_dict(), "path": str(path) if path else None}


# --- appended: the two-view lens (nca_interp.lens) ------------------------------------------

@dataclass(eq=False)
class Lens(Fields):
    """One checkpoint's two views token by token (nca_interp.lens), on its own samples
    y ~ g(.|x); series: kl = KL(q_x || q_c) per response token, kl_control the same with a
    wrong c' of c's form, kl_floor the no-c view against itself in another layout (arithmetic),
    flip / flip_control the share of tokens whose top token the context changes."""

    n_items: int = need("items sampled")
    n_units: int = need("independent units among them (what the intervals resample)")
    n_tokens: int = need("response tokens compared")
    overall: dict = need("per series: its token mean over every response token")
    thirds: dict = need("per series: token means in the first, middle and last third of each "
                        "response (t / its length)")
    ci95: dict = need("95% cluster-bootstrap intervals: `<series>` of the overall mean, "
                      "`<series>_thirds` of each third's, `<series>_parts` of each part's")
    by_position: dict = need("per series: the mean at each response position over the items "
                             "that reach it (`n`: how many do)")
    example: dict = need("the response with the largest summed kl, token by token: tokens, "
                         "kl, kl_control, flip, each view's top token, and with the lens the "
                         "layer the views part at and lens_kl (layer x token)")
    forks: dict = need("greedy both ways: correct_no_c, correct_c, n_harm, n_help and, for the "
                       "first max_cases of each, the case (item, unit, first_fork, n_forks, "
                       "forks (their positions; not in reports before the null), n_tokens, "
                       "the tokens at it, other_view_right, restored by swapping one token, "
                       "forks_to_restore, the responses, null_at / null_right: the null's "
                       "swaps where the views agree and whether each made it right, "
                       "restored_null their share); harm_restored / help_restored: the "
                       "shares restored by the first swap, *_within by at most max_forks, "
                       "*_restored_null the null's share (None in reports made before it)")
    parts: dict | None = doc("per series: token means over each response's first token, its "
                             "answer tokens (the span the task's scorer reads; None where the "
                             "task names none) and its last token (`lens.PARTS`); n_tokens of "
                             "each (None in reports made before the parts)")
    depth: dict | None = doc("the logit lens per layer (the report's `layers`): lens_kl and "
                             "lens_kl_control (KL between the views' lens distributions), "
                             "lens_flip (share of tokens whose lens top-1s differ), settle_x / "
                             "settle_c (mean first layer from which a view's lens top-1 stays "
                             "its final one), part (mean first layer from which the views' "
                             "top-1s stay apart, at forks) and part_counts (forks per layer)")
    responses: list | None = doc("the sampled responses, as text")


@dataclass(kw_only=True, eq=False)
class LensReport(Report):
    ANALYSIS: ClassVar[str] = "lens"
    OPEN: ClassVar[bool] = False
    ENTRY: ClassVar[type[Fields]] = Lens

    layers: list = need("the lens's layer labels (embed, 0, 1, ...; the last is the output); "
                        "empty without the lens")
    checkpoints: list = need("the checkpoint folders read, in order")
    control: dict | None = doc("what the wrong context c' of kl_control and flip_control was "
                               "(evaluate.control_record: c_prime, c_prime_source, "
                               "c_prime_file with its sha256, c_prime_examples); the lens "
                               "generates no answers with c': it reads the samples under "
                               "[c', x]")
    over_training: dict | None = doc(
        "with --over-training, per run: `step` (0: the checkpoint it started from), "
        "`checkpoint` (each step's key of results), `region` (all, first, middle, last), each "
        "series (kl, kl_control, kl_floor, flip, flip_control) as step x region token means, "
        "`ci95` (step x region x bound), `by_position` (step x position, None past a step's "
        "longest response), `forks` (correct_no_c, correct_c, n_harm, n_help per step) and "
        "`dims` naming each array's dimensions")
