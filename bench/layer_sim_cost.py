"""layer_sim's capture (TransformerBridge run_with_cache: residuals + attention patterns)
against a plain HF forward with output_hidden_states on the same batch.

    python -m bench.layer_sim_cost [--ckpt DIR] [--batch 100] [--threads 2]
"""

from __future__ import annotations

import torch

from bench.common import parse_args, timeit
from nca_interp.checkpoint import load_checkpoint
from nca_interp.forward import positions
from nca_interp.hooks import boot_bridge, capture
from nca_interp.rollout import encode
from nca_interp.tasks import make_task


def main(argv=None):
    args = parse_args(__doc__, argv, batch=100)
    model, tok = load_checkpoint(args.ckpt)
    eager, _ = load_checkpoint(args.ckpt)
    eager.set_attn_implementation("eager")
    bridge = boot_bridge(args.ckpt)
    task = make_task("sokoban")
    levels = task.levels("bench", args.batch)
    ids, mask = encode(tok, [task.prompt(lv, task.context(lv, "state")) + lv.solution
                             for lv in levels])
    pos = positions(mask)
    with torch.no_grad():
        hf = timeit(lambda: model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                  output_hidden_states=True))
        hf_eager = timeit(lambda: eager(input_ids=ids, attention_mask=mask, position_ids=pos,
                                        output_hidden_states=True, output_attentions=True))
        resid = timeit(lambda: capture(bridge, ids, mask))
        full = timeit(lambda: capture(bridge, ids, mask, patterns=True))
    print(f"{'batch x tokens':<46}{ids.shape[0]} x {ids.shape[1]}")
    print(f"{'HF sdpa, output_hidden_states (s)':<46}{hf:.4f}")
    print(f"{'HF eager, hidden states + attentions (s)':<46}{hf_eager:.4f}")
    print(f"{'bridge run_with_cache, resid_post (s)':<46}{resid:.4f}  ({resid / hf:.2f}x sdpa)")
    print(f"{'bridge run_with_cache, resid + patterns (s)':<46}{full:.4f}  ({full / hf:.2f}x "
          f"sdpa, {full / hf_eager:.2f}x eager+attentions)")


if __name__ == "__main__":
    main()
