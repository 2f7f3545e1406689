"""OPD step vs NCA step on the same batch, and our KV-cache sampler vs HF `generate`.

    python -m bench.distill_step [--ckpt runs/sokoban_base] [--batch 128] [--threads 2]

Predicted ratio by counting passes, in token-proportional units (a forward over T tokens costs
T, a backward 2T): OPD = sample + student fwd+bwd on [x, y] + teacher fwd on [c, x, y];
NCA adds a student fwd+bwd on [c, x, y]. The sampling time is measured and added to both.
"""

from __future__ import annotations

import torch

from bench.common import parse_args, timeit
from nca_interp.checkpoint import load_checkpoint
from nca_interp.evaluate import max_response_tokens
from nca_interp.losses import combine, loss_terms
from nca_interp.rollout import encode, onpolicy_batch, sample
from nca_interp.tasks import make_task


def main(argv=None):
    args = parse_args(__doc__, argv, batch=128, context="plan")
    student, tok = load_checkpoint(args.ckpt)
    teacher, _ = load_checkpoint(args.ckpt)
    teacher.requires_grad_(False)
    task = make_task("sokoban")
    levels = task.levels("bench", args.batch)
    max_new = max_response_tokens(task)
    gen = torch.Generator().manual_seed(0)
    batch, _, _ = onpolicy_batch(student, tok, task, levels, args.context, max_new, 1.0, gen)
    opt = torch.optim.AdamW(student.parameters(), lr=0.0)  # lr 0: every step sees one model

    def update(beta):
        terms = loss_terms(student, teacher, batch, ("opd", "nca") if beta else ("opd",))
        opt.zero_grad()
        combine(terms, beta).backward()
        opt.step()

    def sample_once():
        sample(student, batch.x_ids, batch.x_mask, max_new, tok.eos_token_id, tok.pad_token_id,
               1.0, torch.Generator().manual_seed(0))

    student.train()
    t_opd = timeit(lambda: update(0.0))
    t_nca = timeit(lambda: update(1.0))
    student.eval()
    t_sample = timeit(sample_once)
    n = batch.resp.shape[1]
    tx, tcx = batch.x_ids.shape[1] + n, batch.cx_ids.shape[1] + n
    opd_units, nca_units = 3 * tx + tcx, 3 * tx + tcx + 3 * tcx
    unit = t_opd / opd_units  # seconds per token-unit, calibrated on the OPD update
    pred_update = nca_units / opd_units
    pred_step = (t_sample + nca_units * unit) / (t_sample + opd_units * unit)
    meas_step = (t_sample + t_nca) / (t_sample + t_opd)

    greedy_ids, greedy_mask = encode(tok, [task.prompt(lv) for lv in levels])
    t_ours = timeit(lambda: sample(student, greedy_ids, greedy_mask, max_new, tok.eos_token_id,
                                   tok.pad_token_id, 0.0), repeat=5)
    t_hf = timeit(lambda: student.generate(
        input_ids=greedy_ids, attention_mask=greedy_mask, max_new_tokens=max_new,
        do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        repeat=5)
    ours, _ = sample(student, greedy_ids, greedy_mask, max_new, tok.eos_token_id,
                     tok.pad_token_id, 0.0)
    hf = student.generate(input_ids=greedy_ids, attention_mask=greedy_mask,
                          max_new_tokens=max_new, do_sample=False,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    hf = hf[:, greedy_ids.shape[1]:][:, : ours.shape[1]]
    agree = float((hf == ours[:, : hf.shape[1]]).float().mean())

    rows = [("batch, |x,y|, |c,x,y| tokens", f"{args.batch}, {tx}, {tcx}"),
            ("sampling (s)", f"{t_sample:.3f}"),
            ("OPD update (s)", f"{t_opd:.3f}"), ("NCA update (s)", f"{t_nca:.3f}"),
            ("update ratio measured", f"{t_nca / t_opd:.3f}"),
            ("update ratio predicted", f"{pred_update:.3f}"),
            ("step ratio measured (+sampling)", f"{meas_step:.3f}"),
            ("step ratio predicted (+sampling)", f"{pred_step:.3f}"),
            ("measured / predicted (update)", f"{t_nca / t_opd / pred_update:.3f}"),
            ("greedy: ours KV cache (s)", f"{t_ours:.3f}"),
            ("greedy: HF generate (s)", f"{t_hf:.3f}"),
            ("HF / ours", f"{t_hf / t_ours:.2f}x"),
            ("token agreement ours vs HF", f"{agree:.4f}")]
    for k, v in rows:
        print(f"{k:<36}{v}")


if __name__ == "__main__":
    main()
