"""The Sokoban sweep: settings where OPD might degrade when the context returns, one pipeline
row each, summarised from the rows' own JSON (numbers are never typed by hand).

    python -m nca_interp.paper.sweep           # print the table
    python -m nca_interp.paper.sweep --write   # also figures/sokoban_sweep/README.md, the beta
                                               # sweeps' pages, docs/results/estimators.md's table

Each row is a `nca_interp.paper.reproduce` command (its figures/<name>/ holds the context-return
table with 95% intervals per seed, the trajectory over training and a manifest with every stage's
time). A row not yet run is listed as such, with the command that runs it. """

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import argparse
from pathlib import Path

import numpy as np

from nca_interp import analysis
from nca_interp.errors import UsageError
from nca_interp.fsio import read_json, write_text
from nca_interp.identity import others, roster, students
from nca_interp.paper.blocks import Block
from nca_interp.paper.layout import CONTEXT_RETURN, TEACHER_GLOB, TRAJECTORY, teacher_file
from nca_interp.paper.settings import load
from nca_interp.regimes import regime

__all__ = ["beta_points", "beta_sweeps", "estimator_rows", "main", "table"]



def rows() -> list[tuple[str, str, str]]:
    """(name, what changes, command) of each sweep row (nca_interp/paper/settings.toml)."""
    settings = load().settings
    return [(name, settings[name].sweep, settings[name].command(name))
            for name in load().sweep_rows]


def seed_cells(report: dict, method: str, key: str) -> list[float]:
    return [r[key] for _, r in students(report, method) if r.get(key) is not None]


def fmt(vals: list[float]) -> str:
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.3f}"
    return f"{np.mean(vals):.3f} ({min(vals):.3f} to {max(vals):.3f})"  # a seed range, not a CI


def teacher_cell(figs: Path, ctx: str) -> str:
    f = figs / teacher_file(ctx)
    if not f.exists():
        return "-"
    r = next(iter(analysis.load(f).results.values()))
    return f"{r.correct_no_c:.3f} / {r.correct_c:.3f}"


def drift_cell(figs: Path, method: str) -> str:
    """Context-view drift KL at the last trajectory step of the first seed, beside step 0."""
    f = figs / TRAJECTORY
    if not f.exists():
        return "-"
    runs = [r for _, r in students(analysis.load(f), method)]
    if not runs:
        return "-"
    rows = runs[0].steps
    return f"{rows[0]['kl_ctx']:.2f} -> {rows[-1]['kl_ctx']:.2f}"


def minutes(figs: Path) -> str:
    f = figs / "manifest.json"
    if not f.exists():
        return "-"
    files = read_json(f)["files"]
    train = sum(v["seconds"] for k, v in files.items() if "checkpoints/step_" in k)
    other = sum(v["seconds"] for k, v in files.items() if "checkpoints/step_" not in k)
    return f"{train / 60:.0f} + {other / 60:.0f}"


def table(figures: Path = Path("figures")) -> str:
    head = ("| row | setting | teacher win no c / with c | method | seeds | win no c | win c | "
            "harm | regimes | drift KL (step 0 -> last) | minutes (train + eval) |")
    lines = [head, "|" + "---|" * 11]
    pending = []
    for name, what, cmd in rows():
        figs = figures / name
        ev = figs / CONTEXT_RETURN
        if not ev.exists():
            teachers = sorted(figs.glob(TEACHER_GLOB))
            if teachers:  # --teacher-only so far: the gap the students would close
                ctx = teachers[0].stem.split("_", 1)[1]
                lines.append(f"| {name} | {what} | {teacher_cell(figs, ctx)} | students not "
                             f"trained | 0 | - | - | - | - | - | {minutes(figs)} |")
            pending.append((name, what, cmd))
            continue
        reports = analysis.load(ev)
        ctx = reports.context
        for method in ("opd", "nca"):
            if not seed_cells(reports, method, "correct_no_c"):
                continue
            regimes = "".join(regime(r) for _, r in students(reports, method))
            lines.append(
                f"| {name} | {what} | {teacher_cell(figs, ctx)} | {method} | "
                f"{len(regimes)} | {fmt(seed_cells(reports, method, 'correct_no_c'))} | "
                f"{fmt(seed_cells(reports, method, 'correct_c'))} | "
                f"{fmt(seed_cells(reports, method, 'harm'))} | {regimes} | "
                f"{drift_cell(figs, method)} | {minutes(figs)} |")
    out = "\n".join(lines)
    out += ("\n\nCells: mean (min to max) over seeds (a spread, not an interval) of the held-out "
            "(1000 levels) greedy win "
            "rates; harm = P(lost with c | won without c); regime per seed from the 95% interval "
            "of correct_c - correct_no_c by the few-clusters rule (A: context hurts, B: still "
            "needed, C: irrelevant). The "
            "null "
            "for every student is its initial checkpoint (step 0; the teacher itself except "
            "in the cross-model row) on the same levels; drift KL = KL(g(.|x,c) || f(.|x,c)) per "
            "token on the student's own samples, first seed: 0 at step 0 when the student starts "
            "as its teacher, the two models' gap in the cross-model row. Minutes: training "
            "stages (from the run directories) + "
            "evaluations and analyses, summed over the row's manifest.")
    if pending:
        out += "\n\nStudents not trained yet:\n" + "\n".join(
            f"- {name}: {what}; `{cmd}`" for name, what, cmd in pending)
    return out


# Estimator rows and the full-vocabulary row each compares with (same task, steps, lr, seeds):
# the settings whose variant is "estimator" (nca_interp/paper/settings.toml)
def estimator_rows() -> dict[str, str]:
    """Each estimator variant and the full-KL setting it varies (settings.toml, when asked)."""
    return {n: st.variant_of for n, st in load().settings.items() if st.variant == "estimator"}


METRICS = ("correct_no_c", "correct_c", "harm", "help", "rel_len_both")


def metric_cells(reports: list[dict]) -> list[str]:
    """One table cell per METRICS over the reports (seeds): mean (min to max), '-' where a
    rate is undefined in every report (e.g. harm with nothing right without c)."""
    def vals(m: str) -> list[float]:
        return [r[m] for r in reports if r.get(m) is not None]

    return [fmt_pct(vals(m)) if m == "rel_len_both" else fmt(vals(m)) for m in METRICS]


def estimator_label(flags: dict[str, str]) -> str:
    """'full', 'sampled k1', 'topk top-4' ... from a command's --kl flags."""
    kl = flags.get("--kl", "full")
    return (kl + (f" {flags.get('--kl-form', 'k1')}" if kl == "sampled" else "")
            + (f" top-{flags.get('--kl-k', '256')}" if kl == "topk" else ""))


def estimator_of(figs: Path) -> str:
    """The estimator a row's students were trained with, read from the distillation commands
    its manifest records (committed, so a fresh clone without runs/ reads the same); a command
    without --kl trained with the full KL."""
    files = read_json((figs / "manifest.json"))["files"].values()
    kinds = set()
    for cmd in (f["command"].split() for f in files if "train.distill" in f["command"]):
        kinds.add(estimator_label({k: v for k, v in zip(cmd, cmd[1:]) if k.startswith("--")}))
    return ", ".join(sorted(kinds)) or "not recorded"


def story(report: dict, seeds: set[str]) -> dict:
    """Does the paper's story hold in one setting's students on `seeds`? OPD's regime per seed
    (A: c hurts, from the interval of correct_c - correct_no_c) and OPD - NCA harm per seed pair
    (the same seed: same levels, same sampling seed) with its paired 95% interval over the held-out
    items (claims.paired_harm_gap), where both carry per-item results. The story holds when
    OPD is in regime A in every seed, every pair's paired interval lies above 0 (a pair
    without per-item results has no interval and is not clear) and no NCA seed is in regime
    A."""
    from nca_interp.paper.claims.stats import paired_harm_gap

    who = roster(report)
    by = {(who[n].method, str(who[n].seed)): r for n, r in students(report)
          if str(who[n].seed) in seeds}
    both = [s for (meth, s) in by if meth == "opd" and ("nca", s) in by]
    pairs = sorted(s for s in both if by["opd", s].harm is not None
                   and by["nca", s].harm is not None)
    opd = [regime(r) for (meth, _), r in sorted(by.items()) if meth == "opd"]
    nca = [regime(r) for (meth, _), r in sorted(by.items()) if meth == "nca"]
    gaps = [by["opd", s].harm - by["nca", s].harm for s in pairs]
    lows = [paired_harm_gap([(s, by["opd", s], by["nca", s])])[1][0]
            if by["opd", s].items_ is not None and by["nca", s].items_ is not None else None
            for s in pairs]
    clear = [lo is not None and lo > 0 for lo in lows]  # a point estimate shows nothing
    return {"opd_a": opd.count("A"), "opd_n": len(opd), "nca_a": nca.count("A"),
            "nca_n": len(nca), "gaps": gaps, "lows": lows, "clear": sum(clear),
            "undefined": len(both) - len(pairs),  # pairs where nothing was right without c
            "holds": bool(opd) and opd.count("A") == len(opd) and bool(gaps) and all(clear)
            and "A" not in nca}


def story_line(row: str, est: str, mine: dict, full: dict, full_name: str) -> str:
    def part(st: dict) -> str:
        gaps, lows = st["gaps"], st["lows"]
        measured = sum(lo is not None for lo in lows)
        how = ("its paired interval above 0" if measured == len(gaps) else
               f"its paired interval above 0 ({len(gaps) - measured} without per-item "
               "results, not clear)")
        harm = (f"OPD - NCA harm {fmt(gaps)}, {how} in {st['clear']} of {len(gaps)} seed "
                f"pairs" + (f" (lowest interval end {min(x for x in lows if x is not None):+.3f})"
                            if measured else "") if gaps else
                f"harm undefined in {st['undefined']} seed pairs (no item right without c)"
                if st["undefined"] else "no OPD/NCA seed pair")
        return (f"OPD regime A in {st['opd_a']} of {st['opd_n']} seeds; {harm}; NCA regime A "
                f"in {st['nca_a']} of {st['nca_n']}")
    if mine["holds"]:
        verdict = ("the story holds (OPD degrades in every seed, NCA's harm is clearly lower in "
                   "every pair)")
    elif full["holds"]:
        verdict = "the estimator changes the story"
    else:
        verdict = "not judged: the story does not hold with the full KL either"
    return (f"- {row} ({est}): {part(mine)}. Full KL ({full_name}, same seeds): {part(full)}. "
            f"**{verdict}**")


def estimator_table(figures: Path = Path("figures")) -> str:
    """Does the KL estimator change the outcome? Each estimator row beside its full-vocabulary
    row on the same seeds: per method, the mean (min to max) over seeds of the held-out rates,
    regimes per seed, and the teacher (every student's step 0) as the null."""
    head = ("| setting | estimator | method | seeds | win no c | win c | harm | help | "
            "rel_len_both | regimes |")
    lines, pending, stories = [head, "|" + "---|" * 10], [], []
    items: dict[str, list[str]] = {}  # "1000 items" -> the rows evaluated on that many
    settings = load().settings
    for row, full in estimator_rows().items():
        if not (figures / row / CONTEXT_RETURN).exists():
            flags = settings[row].flags
            pending.append(f"- {row} ({estimator_label(dict(zip(flags, flags[1:])))}, beside "
                           f"{full}): `{settings[row].command(row)}`")
            continue
        rep = {name: analysis.load(figures / name / CONTEXT_RETURN)
               for name in (full, row)}
        seeds = {str(roster(rep[row])[n].seed) for n, _ in students(rep[row])}
        # the teacher: the one entry that is no student (`<task>_base`, or the fetched model)
        base = others(rep[row])[0][1]
        items.setdefault(f"{base.n} items", []).append(row)
        stories.append(story_line(row, estimator_of(figures / row), story(rep[row], seeds),
                                  story(rep[full], seeds), full))
        lines.append(f"| {row} | (teacher: step 0) | - | - | " + " | ".join(metric_cells([base]))
                     + f" | {regime(base)} |")
        for method in ("opd", "nca"):
            for name in (full, row):
                who = roster(rep[name])
                runs = {n: r for n, r in students(rep[name], method)
                        if str(who[n].seed) in seeds}
                if not runs:
                    continue
                est = estimator_of(figures / name)
                lines.append(f"| {name} | {est} | {method} | {len(runs)} | "
                             + " | ".join(metric_cells(list(runs.values()))) + " | "
                             + "".join(regime(r) for r in runs.values()) + " |")
    if len(lines) == 2:  # no estimator row trained
        return ""
    out = "\n".join(lines) + (
        "\n\nSame seeds in both rows (seeds the estimator row ran); cells: mean (min to max) "
        "over seeds, held-out items of the task ("
        + "; ".join(f"{n}: {', '.join(rows)}" for n, rows in items.items())
        + "); win = greedy win or accuracy; harm = P(lost with c | "
        "won without c), help = P(won with c | lost without c), '-' where no item qualifies "
        "(nothing right without c); regimes per seed (A: context "
        "hurts, B: still needed, C: irrelevant). The teacher is every student's step 0.\n\n"
        "Does the story survive the estimator? (per seed: OPD's regime, and OPD - NCA harm on "
        "the same seed with its paired 95% interval over the held-out items; the full-KL "
        "students of the same seeds beside)\n" + "\n".join(stories))
    if pending:
        out += "\n\nEstimator rows not trained yet:\n" + "\n".join(pending)
    return out


# The NCA weight swept on one setting: the settings holding its other betas (beta 0 is the
# base setting's OPD, the NCA term absent; its NCA students carry their own --beta)
def beta_sweeps() -> dict[str, tuple[str, ...]]:
    """Each setting with beta variants, and its variants (settings.toml, when asked)."""
    catalogue = load()
    return {base: v for base in catalogue.settings if (v := catalogue.variants(base, "beta"))}


def _trained_with(figs: Path) -> dict[str, dict[str, str]]:
    """Run name -> the flags of the train.distill command its manifest records."""
    out = {}
    for f in read_json((figs / "manifest.json"))["files"].values():
        cmd = f["command"].split()
        if "train.distill" in cmd:
            flags = dict(zip(cmd, cmd[1:]))
            out[Path(flags["--out"]).name] = flags
    return out


def beta_points(base: str, figures: Path = Path("figures")) -> tuple[list[dict], dict]:
    """Every student of the sweep as {beta, seed, harm, help, their 95% intervals, win rates,
    regime}, on the seeds every beta ran (so each beta averages the same seeds), and the
    teacher (step 0, the null). beta is read from each run's recorded training command."""
    points = []
    for name in (base, *beta_sweeps()[base]):
        figs = figures / name
        if not (figs / CONTEXT_RETURN).exists():
            continue
        flags = _trained_with(figs)
        rep = analysis.load(figs / CONTEXT_RETURN)
        for run, r in students(rep):
            who = roster(rep)[run]
            if who.method == "nca" and who.beta is None and run not in flags:
                raise UsageError(f"{figs}/manifest.json records no training command for {run}, "
                                 "so its beta is unknown; re-run its pipeline")
            # the run config's beta where the report records it, else its training command's
            beta = 0.0 if who.method == "opd" else who.beta if who.beta is not None else \
                float(flags[run].get("--beta", 1.0))
            points.append({"beta": beta, "seed": who.seed, "run": run,
                           **{k: r[k] for k in ("harm", "help", "correct_no_c", "correct_c")},
                           "regime": regime(r),
                           "harm_ci": r.ci95["harm"], "help_ci": r.ci95["help"]})
    betas = {p["beta"] for p in points}
    common = set.intersection(*({p["seed"] for p in points if p["beta"] == b} for b in betas)) \
        if betas else set()
    rep = analysis.load(figures / base / CONTEXT_RETURN) \
        if (figures / base / CONTEXT_RETURN).exists() else None
    teacher = others(rep)[0][1] if rep and others(rep) else None
    return sorted((p for p in points if p["seed"] in common),
                  key=lambda p: (p["beta"], p["seed"])), teacher


def beta_table(base: str, figures: Path = Path("figures")) -> str:
    """Harm and help per NCA weight (mean (min to max) over the same seeds)."""
    points, teacher = beta_points(base, figures)
    if len({p["beta"] for p in points}) < 2:
        return ""
    lines = ["| beta | students | seeds | harm | independence baseline | help | win no c | "
             "win c | regimes |", "|---|---|---|---|---|---|---|---|---|"]

    def num(v):
        return "-" if v is None else f"{v:.3f}"

    if teacher:
        lines.append(f"| (teacher: step 0) | - | - | {num(teacher.harm)} | "
                     f"{num(1 - teacher.correct_c)} | {num(teacher.help)} | "
                     f"{num(teacher.correct_no_c)} | {num(teacher.correct_c)} | "
                     f"{regime(teacher)} |")
    for beta in sorted({p["beta"] for p in points}):
        row = [p for p in points if p["beta"] == beta]
        who = "OPD" if beta == 0 else "NCA"
        cells = [fmt([p["harm"] for p in row if p["harm"] is not None]),
                 fmt([1 - p["correct_c"] for p in row]),
                 *(fmt([p[k] for p in row if p[k] is not None])
                   for k in ("help", "correct_no_c", "correct_c"))]
        lines.append(f"| {beta:g} | {who} | {', '.join(str(p['seed']) for p in row)} | "
                     + " | ".join(cells) + f" | {''.join(p['regime'] for p in row)} |")
    return "\n".join(lines) + (
        f"\n\n`{base}` and its beta settings ({', '.join(beta_sweeps()[base])}), the seeds every "
        "beta ran; beta 0 is OPD (no NCA term). Cells: mean (min to max) over seeds of each "
        "student's held-out rates; harm = P(wrong with c | right without c), beside it its "
        "independence baseline 1 - win c (the harm of a student whose answers with and without "
        "c are unrelated), help = P(right with c | wrong without c); the teacher is every "
        "student's step 0.")


def beta_figure(base: str, figures: Path = Path("figures")):
    """Harm against help (left) and against right without c (right), a point per student (95%
    intervals of harm and help as whiskers), the mean of each beta joined in beta order, the
    teacher (step 0, the null) as a star. harm needs items right without c: a student with
    none is drawn in neither panel."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    points, teacher = beta_points(base, figures)
    points = [p for p in points if p["harm"] is not None]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("harm against help", "harm against right without c"))
    betas = sorted({p["beta"] for p in points})
    for i, beta in enumerate(betas):
        row = [p for p in points if p["beta"] == beta]
        style = {"mode": "markers", "text": [p["run"] for p in row],
                 "marker": {"size": 8, "color": COLOURS[i % len(COLOURS)]},
                 "legendgroup": f"{beta:g}",
                 "error_y": {"type": "data", "symmetric": False,
                             "array": [p["harm_ci"][1] - p["harm"] for p in row],
                             "arrayminus": [p["harm"] - p["harm_ci"][0] for p in row]}}
        name = f"beta {beta:g}" + (" (OPD)" if beta == 0 else "")
        fig.add_trace(go.Scatter(
            x=[p["help"] for p in row], y=[p["harm"] for p in row], name=name,
            error_x={"type": "data", "symmetric": False,
                     "array": [p["help_ci"][1] - p["help"] for p in row],
                     "arrayminus": [p["help"] - p["help_ci"][0] for p in row]}, **style),
            row=1, col=1)
        fig.add_trace(go.Scatter(x=[p["correct_no_c"] for p in row], y=[p["harm"] for p in row],
                                 name=name, showlegend=False, **style), row=1, col=2)
    for col, key in ((1, "help"), (2, "correct_no_c")):
        means = [(np.mean([p[key] for p in points if p["beta"] == b]),
                  np.mean([p["harm"] for p in points if p["beta"] == b])) for b in betas]
        fig.add_trace(go.Scatter(x=[m[0] for m in means], y=[m[1] for m in means],
                                 mode="lines+markers+text", text=[f"{b:g}" for b in betas],
                                 textposition="top right", name="mean per beta",
                                 legendgroup="mean", showlegend=col == 1,
                                 line={"color": "#444", "dash": "dot"},
                                 marker={"symbol": "diamond", "size": 11, "color": "#444"}),
                      row=1, col=col)
    if teacher and teacher.harm is not None:
        for col, key in ((1, "help"), (2, "correct_no_c")):
            fig.add_trace(go.Scatter(x=[teacher[key]], y=[teacher.harm], mode="markers",
                                     name="teacher (step 0, the null)", legendgroup="teacher",
                                     showlegend=col == 1,
                                     marker={"symbol": "star", "size": 14, "color": "#1f77b4"}),
                          row=1, col=col)
    seeds = sorted({p["seed"] for p in points})
    note = "" if teacher is None or teacher.harm is not None else \
        "; step 0 is right on no item without c, so has no harm"
    fig.update_layout(title=f"{base}: the NCA weight beta<br><sup>seeds "
                            f"{', '.join(map(str, seeds))}; whiskers: 95% intervals; beta 0 "
                            f"is OPD{note}</sup>",
                      height=560, autosize=True, margin={"t": 110},
                      legend={"orientation": "h", "y": -0.2})
    fig.update_xaxes(title_text="help = P(right with c | wrong without c)", row=1, col=1)
    fig.update_xaxes(title_text="right without c", row=1, col=2)
    fig.update_yaxes(title_text="harm = P(wrong with c | right without c)", row=1, col=1)
    return fig


COLOURS = ("#d62728", "#ff7f0e", "#bcbd22", "#2ca02c", "#17becf", "#9467bd")


def fmt_pct(vals: list[float]) -> str:
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{100 * vals[0]:+.1f}%"
    return (f"{100 * np.mean(vals):+.1f}% ({100 * min(vals):+.1f}% to "
            f"{100 * max(vals):+.1f}%)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", default="figures")
    ap.add_argument("--write", action="store_true",
                    help="write FIGURES/sokoban_sweep/README.md, the beta sweeps' pages and "
                         "the estimator block of --page")
    ap.add_argument("--page", default=str(ESTIMATORS_PAGE),
                    help="the page whose estimator block is rewritten")
    ap.add_argument("--png", action="store_true", help="also write the beta figures' PNGs")
    args = ap.parse_args(argv)
    text = table(Path(args.figures))
    print(text)
    print("\n" + estimator_table(Path(args.figures)))
    if args.write:
        out = Path(args.figures) / "sokoban_sweep" / "README.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmds = "\n".join(f"    {cmd}" for _, _, cmd in rows())
        write_text(out, f"# Sokoban sweep\n\nGenerated by `python -m nca_interp.paper.sweep "
                        f"--write` from "
                       f"each row's figures/<row>/ JSON.\n\nRows:\n\n{cmds}\n\n{text}\n")
        est = estimator_table(Path(args.figures))
        if est:
            ESTIMATORS.write(Path(args.page), est)
        for base in beta_sweeps():
            text_b = beta_table(base, Path(args.figures))
            if not text_b:
                continue
            out = Path(args.figures) / f"{base}_beta_sweep"
            out.mkdir(parents=True, exist_ok=True)
            from nca_interp.plots import write_figure

            write_figure(beta_figure(base, Path(args.figures)), out / "harm_vs_help",
                         png=args.png)
            image = "![harm against help and right without c](harm_vs_help.png)" \
                if (out / "harm_vs_help.png").exists() else ""
            write_text((out / "README.md"),
                f"# {base}: the NCA weight beta\n\nGenerated by `python -m nca_interp.paper.sweep "
                f"--write --png` from the runs' JSON ([interactive](harm_vs_help.html))."
                f"\n\n{image}\n\n{text_b}\n")


ESTIMATORS = Block.named("estimators", "python -m nca_interp.paper.sweep --write")
ESTIMATORS_PAGE = Path("docs/results/estimators.md")


if __name__ == "__main__":
    from nca_interp.cli import started

    started()
    main()
