r"""OPD and NCA in TRL: `NCADistillationTrainer` on TRL's `DistillationTrainer` (trl==1.16.0, the
optional extra `pip install nca_interp[trl]`), so the loss runs wherever TRL runs (accelerate:
DDP, FSDP, DeepSpeed; GPU configs in `train/accelerate/`, CPU processes through torchrun).

    accelerate launch --config_file train/accelerate/ddp_cpu.yaml -m train.trl_distill \
        --student runs/sokoban_base --out runs/trl_nca --method nca

The dataset has two prompt columns: `prompt`, the student's view x, and `teacher_prompt`, the
same input with the privileged context [c, x]. TRL samples on-policy from `prompt` (the student
never sees c); the loss then replaces TRL's generalised JSD with ours (`nca_interp.losses`) on
the same sampled tokens:

    L = KL(g(.|x) || f(.|x,c)) + nca_beta * KL(sg[g(.|x)] || g(.|x,c))

with the estimator of `--kl` (full, top-k, sampled; `nca_interp.losses.Estimator`). Tokens are
summed and divided by TRL's global token count, as TRL does, so gradient accumulation and data
parallelism give the global token mean. The teacher prompt is never truncated: a teacher prompt
plus `max_completion_length` that does not fit either model's context is refused before any
step (a truncated [c, x] would silently drop the context). The views are computed from full
logits (not TRL's chunked projection): at the sizes this package studies that is what
`nca_interp.losses` computes, and it is what the parity test holds it to. The shared-prefix
caching of our loop runs here too, inside the loss (no fork of TRL's trainer): the teacher's
prefix keys and values once per run, the student's context view's prefix once per batch.
TRL's own generation is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from nca_interp.errors import UsageError
from nca_interp.losses import Estimator, combine, loss_terms
from nca_interp.models import auto_bf16, context_limit
from nca_interp.prefix import PrefixCache
from nca_interp.rollout import Batch

__all__ = ["NCADistillationConfig", "NCADistillationTrainer"]

try:
    from trl import DistillationConfig, DistillationTrainer
except ImportError as e:  # pragma: no cover - the optional extra is missing
    raise ImportError("nca_interp.trl_nca needs TRL: pip install 'nca_interp[trl]' "
                      "(trl==1.16.0)") from e


@dataclass
class NCADistillationConfig(DistillationConfig):
    """TRL's DistillationConfig plus the NCA weight and the KL estimator (TRL's own `beta`,
    its JSD interpolation, is not used: the loss is ours). `bf16` left unset means
    `--precision auto` (`models.auto_bf16`: bf16 on a GPU and on a CPU with native bf16, fp32
    where the CPU emulates it; TRL's own default is bf16 everywhere)."""

    nca_beta: float = field(default=1.0, metadata={"help": "NCA weight (0: plain OPD)"})
    teacher_prompt_column: str = field(default="teacher_prompt", metadata={
        "help": "dataset column with the teacher's prompt [c, x]"})
    kl: str = field(default="full", metadata={"help": "full | topk | sampled"})
    kl_k: int = field(default=256, metadata={"help": "topk: support size"})
    kl_support: str = field(default="p", metadata={"help": "topk: p | q"})
    kl_tail: str = field(default="renorm", metadata={"help": "topk: renorm | bucket | none"})
    kl_form: str = field(default="k1", metadata={"help": "sampled: k1 | k3"})

    def __post_init__(self):
        # TRL turns bf16 autocast on wherever fp16 is off, the CPU included, though a CPU
        # without native bf16 runs it several times slower than fp32
        # (bench/results/precision_*.txt); the package's rule is `--precision auto`
        if self.bf16 is None and not self.fp16:
            gpu = not self.use_cpu and torch.cuda.is_available()
            self.bf16 = auto_bf16(torch.device("cuda" if gpu else "cpu"))
        super().__post_init__()
        if not self.nca_beta >= 0:
            raise UsageError(f"nca_beta must be >= 0, not {self.nca_beta}")
        self.estimator  # noqa: B018 - validates the estimator fields

    @property
    def estimator(self) -> Estimator:
        return Estimator(self.kl, self.kl_k, self.kl_support, self.kl_tail, self.kl_form)


class NCADistillationTrainer(DistillationTrainer):
    """TRL's on-policy distillation with a privileged teacher prompt and the NCA anchor."""

    args: NCADistillationConfig  # what it is built with (TRL's Trainer declares its base)
    model: Any  # the student, a transformers model (TRL's Trainer declares it Optional)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prefix_cache = PrefixCache()  # the frozen teacher's shared context, once per run
        col = self.args.teacher_prompt_column
        if self.train_dataset is not None:
            self._check_teacher_prompts(self.train_dataset[col])

    def _check_teacher_prompts(self, prompts: list) -> None:
        """Refuse, before any step, a teacher prompt that the models' context cannot hold with
        the completion budget (TRL would not truncate it, the model would fail or forget c)."""
        ids, _, _ = self._tokenize_prompts(list(prompts))
        longest = max(len(x) for x in ids)
        budget = self.args.max_completion_length or 0
        limit = min(filter(None, (context_limit(self.model), context_limit(self.teacher_model))),
                    default=None)
        if limit is not None and longest + budget > limit:
            raise UsageError(f"a teacher prompt of {longest} tokens plus max_completion_length "
                             f"{budget} exceeds the models' context of {limit} tokens; shorten "
                             "the context or lower max_completion_length (the privileged "
                             "context is never truncated)")

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if self.args.teacher_prompt_column not in self._signature_columns:
            self._signature_columns = [*self._signature_columns,
                                       self.args.teacher_prompt_column]

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        ids, _, _ = self._tokenize_prompts([x[self.args.teacher_prompt_column] for x in inputs])
        rows = [torch.tensor(x) for x in ids]
        width = max(len(r) for r in rows)
        pad = self._tokenizer.pad_token_id
        t_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        t_mask = torch.zeros_like(t_ids)
        for i, r in enumerate(rows):  # left padding, as the student's prompts
            t_ids[i, width - len(r):], t_mask[i, width - len(r):] = r, 1
        out["teacher_prompt_ids"] = t_ids.to(out["prompt_ids"].device)
        out["teacher_prompt_mask"] = t_mask.to(out["prompt_ids"].device)
        return out

    def batch_of(self, inputs) -> Batch:
        """The TRL inputs as the `Batch` of `nca_interp.losses`: x, [c, x], the completion."""
        return Batch(inputs["prompt_ids"], inputs["prompt_mask"], inputs["teacher_prompt_ids"],
                     inputs["teacher_prompt_mask"], inputs["completion_ids"],
                     inputs["completion_mask"])

    def _compute_loss(self, unwrapped_student, inputs, num_items_in_batch):
        batch = self.batch_of(inputs)
        beta = self.args.nca_beta
        terms = ("opd", "nca") if beta else ("opd",)
        denom = num_items_in_batch if num_items_in_batch is not None else \
            batch.resp_mask.sum().clamp(min=1)
        self.teacher_model.eval()
        out = loss_terms(unwrapped_student, self.accelerator.unwrap_model(self.teacher_model),
                         batch, terms, denom=denom, temperature=self.args.temperature,
                         estimator=self.args.estimator, prefix_cache=self.prefix_cache)
        for name, value in out.items():
            self._metrics["train" if self.model.training else "eval"][f"kl_{name}"].append(
                float(value.detach() * denom / batch.resp_mask.sum().clamp(min=1)))
        n = batch.resp_mask.sum()
        # no entropy is computed here: TRL logs entropy_sum / tokens, so NaN, never a false 0
        return combine(out, beta), torch.full((), float("nan"), device=n.device), n
