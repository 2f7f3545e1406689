"""A hand-written OPD / NCA loop: plain torch + transformers, nothing from nca_interp.

The teacher is the initial model with the persona as its system message (c); the student is
the same model without it and samples its own responses y ~ g(.|x). Per response token:

    OPD  KL(g(.|x) || f(.|x,c))                 over the vocabulary, on the student's tokens
    NCA  OPD + beta * KL(sg[g(.|x)] || g(.|x,c))  the no-context view anchors the context view

    python docs/examples/persona/opd_loop.py --model MODEL --method opd --out runs/persona/opd
"""

import argparse
import json
import random
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = Path(__file__).parent
p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--method", choices=("opd", "nca"), required=True)
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--lr", type=float, default=2e-5)
p.add_argument("--beta", type=float, default=1.0)
p.add_argument("--max-new", type=int, default=32)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
torch.manual_seed(args.seed)
random.seed(args.seed)
torch.set_num_threads(args.threads)

persona = (HERE / "persona.txt").read_text().strip()
items = [json.loads(line) for line in open(HERE / "prompts.jsonl")]
train = [it["prompt"] for it in items if it["split"] == "train"]
tok = AutoTokenizer.from_pretrained(args.model)
tok.padding_side = "left"
student = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
teacher = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
teacher.requires_grad_(False)
opt = torch.optim.AdamW(student.parameters(), lr=args.lr, weight_decay=0.0)


def chat(prompt, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def response_logprobs(model, prompts, responses):
    """log-probabilities at the positions that predict each response token, [B, R, V], with
    sequences left-padded so that every response ends at the last position."""
    seqs = [tok(p, add_special_tokens=False).input_ids + r for p, r in zip(prompts, responses)]
    L, R = max(map(len, seqs)), max(map(len, responses))
    ids = torch.tensor([[tok.pad_token_id] * (L - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (L - len(s)) + [1] * len(s) for s in seqs])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    return F.log_softmax(logits[:, L - R - 1: L - 1].float(), -1)


for step in range(args.steps):
    batch = random.sample(train, args.batch)
    x = [chat(q) for q in batch]
    cx = [chat(q, persona) for q in batch]
    student.eval()
    with torch.no_grad():
        enc = tok(x, return_tensors="pt", padding=True, add_special_tokens=False)
        out = student.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0,
                               max_new_tokens=args.max_new, pad_token_id=tok.pad_token_id)
    responses = []
    for row in out[:, enc.input_ids.shape[1]:].tolist():
        cut = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
        responses.append(row[:cut])
    R = max(map(len, responses))
    valid = torch.tensor([[0] * (R - len(r)) + [1] * len(r) for r in responses]).float()
    student.train()
    with torch.no_grad():
        f_c = response_logprobs(teacher, cx, responses)
    g_x = response_logprobs(student, x, responses)
    opd = (g_x.exp() * (g_x - f_c)).sum(-1)  # KL(g(.|x) || f(.|x,c)) per token
    loss = (opd * valid).sum() / valid.sum()
    nca = torch.zeros(())
    if args.method == "nca":
        g_c = response_logprobs(student, cx, responses)
        anchor = g_x.detach()
        nca = (anchor.exp() * (anchor - g_c)).sum(-1)  # KL(sg[g(.|x)] || g(.|x,c))
        nca = (nca * valid).sum() / valid.sum()
        loss = loss + args.beta * nca
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step + 1:3d}  opd {float((opd.detach() * valid).sum() / valid.sum()):.4f}  "
          f"nca {float(nca.detach()):.4f}  mean |y| {valid.sum(1).mean():.1f}", flush=True)

partial = Path(args.out + ".partial")  # renamed when whole: a killed save leaves no --out
student.save_pretrained(partial)
tok.save_pretrained(partial)
partial.rename(args.out)
print(f"saved {args.out}")
