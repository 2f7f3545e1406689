#!/usr/bin/env bash
# The persona example end to end: a hand-written OPD / NCA loop trains two students of
# SmolLM2-135M-Instruct (plus an OPD student of another seed, the seed-to-seed null of the
# update comparison), then every analysis of nca_interp reads them as checkpoints it did not
# train. docs/own_data.md walks through it.
#
#   bash docs/examples/persona/run.sh                  # figures/persona, runs/persona
#   MODEL=path/to/model STEPS=4 OUT=/tmp/p FIG=/tmp/p/fig bash docs/examples/persona/run.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-python}
MODEL=${MODEL:-$($PY -m nca_interp.fetch smollm2-135m-instruct | tail -n 1)}
OUT=${OUT:-runs/persona}
FIG=${FIG:-figures/persona}
STEPS=${STEPS:-48}
LR=${LR:-5e-5}
THREADS=${THREADS:-2}
N_RANDOM=${N_RANDOM:-20}
# random-head draws that also generate (the answers-flipped null): 0 as facts_rule publishes;
# 20 ran for over two and a half hours on 2 cores without finishing
N_GENERATE=${N_GENERATE:-0}
PNG=${PNG---png}  # PNG= writes the interactive HTML only (PNGs need kaleido and chromium)
# c' for the control (evaluate --control, the lens): a wrong persona of c's form, not the default
# shuffle of c's own words (with one shared c, another item's context would be c itself)
OPTS="data=$HERE/prompts.jsonl,context_file=$HERE/persona.txt,control_file=$HERE/wrong_persona.txt"
OPTS="$OPTS,scorer=$HERE/score.py:captain_quill"

train() {  # method seed folder: skipped when the folder already holds the weights
    [ -f "$3/model.safetensors" ] || $PY "$HERE/opd_loop.py" --model "$MODEL" --method "$1" \
        --seed "$2" --steps "$STEPS" --lr "$LR" --threads "$THREADS" --out "$3"
}
train opd 0 "$OUT/opd"
train nca 0 "$OUT/nca"
train opd 1 "$OUT/opd_s1"

mkdir -p "$FIG"
A="--task jsonl --task-options $OPTS"
# fp32 as the published figures were computed: the default (auto) autocasts to bf16 on a CPU
# with native bf16, and greedy answers then differ from the published ones
P="--precision fp32"
$PY -m nca_interp.evaluate "$MODEL" "$OUT/opd" "$OUT/nca" $A $P --control --out "$FIG/evaluate" $PNG
$PY -m nca_interp.layer_sim "$MODEL" "$OUT/opd" "$OUT/nca" $A --responses own \
    --out "$FIG/layer_sim" $PNG
$PY -m nca_interp.grad_align "$MODEL" "$OUT/opd" "$OUT/nca" $A $P --teacher "$MODEL" \
    --batch 16 --parts 4 --out "$FIG/grad_align" $PNG
$PY -m nca_interp.param_delta "$OUT/opd" "$OUT/nca" "$OUT/opd_s1" --init "$MODEL" \
    --control "$OUT/opd,$OUT/opd_s1" --lr "$LR" --steps "$STEPS" --out "$FIG/param_delta" $PNG
$PY -m nca_interp.patching "$OUT/opd" "$OUT/nca" $A --kind help --scope groups --n-random "$N_RANDOM" \
    --n-random-generate "$N_GENERATE" --out "$FIG/patching" $PNG
$PY -m nca_interp.lens "$MODEL" "$OUT/opd" "$OUT/nca" $A --out "$FIG/lens" $PNG
$PY "$HERE/page.py" "$FIG"
