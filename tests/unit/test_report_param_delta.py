"""The setting page's parameter-delta section lists layers in depth order: the report keys
layers as text, which sorted "10" before "2" on the 30-layer setting's page."""

import re
from pathlib import Path

from nca_interp.paper import report

FIGS = Path(__file__).resolve().parents[2] / "figures" / "sokoban_smollm2_lora"


def test_the_per_layer_table_runs_in_depth_order_with_all_last():
    text = report.param_delta(FIGS).split("Delta per layer:")[1].split("Do NCA's")[0]
    keys = [m.group(1) for m in re.finditer(r"^\| (\w+) \| \d", text, flags=re.M)]
    depth = [k for k in keys if k.isdigit()]
    assert depth == [str(i) for i in range(30)]
    assert keys[:30] == depth and set(keys[30:]) <= {"all", "embed", "final_norm", "lm_head"}
