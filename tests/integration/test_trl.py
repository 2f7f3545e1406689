"""The TRL path (nca_interp.trl_nca): one step's losses and gradients equal nca_interp.losses on
the same sampled batch; the privileged context is never truncated; the checkpoint it writes
opens in the analyses."""

import pytest
import torch

from nca_interp.losses import combine, loss_terms
from nca_interp.tasks import make_task
from tests.conftest import tiny


def dataset(n=8):
    from datasets import Dataset

    task = make_task("sokoban")
    levels = task.levels("train", n)
    return Dataset.from_dict({"prompt": [task.prompt(lv) for lv in levels],
                              "teacher_prompt": [task.prompt(lv, task.context(lv, "plan"))
                                                 for lv in levels]})


def trainer_for(tok, tmp_path, **cfg):
    from nca_interp.trl_nca import NCADistillationConfig, NCADistillationTrainer

    args = NCADistillationConfig(**{
        "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 4,
        "max_completion_length": 8, "use_cpu": True, "report_to": [], "max_steps": 1,
        "logging_steps": 1, "save_strategy": "no", "seed": 0, **cfg})
    student, teacher = tiny(tok, seed=0), tiny(tok, seed=1)
    return NCADistillationTrainer(model=student, teacher_model=teacher, args=args,
                                  train_dataset=dataset(), processing_class=tok)


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_one_step_equals_the_package_loss(tok, tmp_path, beta):
    """On the batch TRL sampled (without c), the trainer's loss and gradient equal
    losses.loss_terms on the same tokens: the teacher sees [c, x], the student x, and the NCA
    term reaches only the context view."""
    trainer = trainer_for(tok, tmp_path, nca_beta=beta)
    rows = [trainer.train_dataset[i] for i in range(4)]
    inputs = trainer._generate_and_score_completions(rows)
    # the views, read back from the tensors: the student's prompt is x, the teacher's [c, x]
    for i, row in enumerate(rows):
        for key, col in (("prompt", "prompt"), ("teacher_prompt", "teacher_prompt")):
            ids = inputs[f"{key}_ids"][i][inputs[f"{key}_mask"][i].bool()]
            assert tok.decode(ids, skip_special_tokens=True) == row[col]
    assert trainer.batch_of(inputs).cx_ids is inputs["teacher_prompt_ids"]
    model = trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(model, inputs)
    loss.backward()
    got = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    batch = trainer.batch_of(inputs)
    terms = loss_terms(model, trainer.teacher_model, batch, ("opd", "nca") if beta else ("opd",))
    ref = combine(terms, beta)
    ref.backward()
    want = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(loss, ref, atol=1e-6)
    assert torch.allclose(got, want, atol=1e-6)
    assert terms["opd"] > 0


def test_a_training_step_on_the_cpu_is_the_fp32_gradient_step(tok, tmp_path):
    """trainer.train() (not compute_loss alone) moves the student by exactly -lr times the
    fp32 gradient of our loss on the batch it sampled: TRL's default bf16 autocast, which its
    training step enters and compute_loss does not, is off on the CPU."""
    import copy

    trainer = trainer_for(tok, tmp_path, optim="sgd", learning_rate=0.01, max_grad_norm=0.0,
                          nca_beta=1.0, generation_kwargs={"do_sample": False})
    assert trainer.args.bf16 is False
    seen = []
    inner = trainer._compute_loss

    def recording(model, inputs, n):
        seen.append(trainer.batch_of(inputs))
        return inner(model, inputs, n)

    trainer._compute_loss = recording
    before = copy.deepcopy(trainer.model)
    trainer.train()
    (batch,) = seen
    ref = combine(loss_terms(before, trainer.teacher_model, batch, ("opd", "nca")), 1.0)
    ref.backward()
    for (name, p0), p1 in zip(before.named_parameters(), trainer.model.parameters()):
        torch.testing.assert_close(p1.detach() - p0.detach(), -0.01 * p0.grad, rtol=1e-4,
                                   atol=1e-7, msg=name)


def test_bf16_stays_what_a_user_asks_for(tmp_path):
    from nca_interp.trl_nca import NCADistillationConfig

    def args(**kw):
        return NCADistillationConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **kw)

    assert args().bf16 is False  # unset on the CPU: fp32
    assert args(bf16=True).bf16 is True


def test_a_context_that_cannot_fit_is_refused(tok, tmp_path):
    from nca_interp.errors import UsageError

    with pytest.raises(UsageError, match="never truncated"):
        trainer_for(tok, tmp_path, max_completion_length=100_000)


def test_two_processes_equal_one_and_the_checkpoint_opens_in_the_analyses(tmp_path):
    """torchrun with two gloo CPU processes (accelerate reads its environment) makes the same
    update as one process with the same global batch: greedy completions so both see the same
    tokens, SGD without clipping so the update is the gradient itself (Adam's first step and
    norm clipping would hide a scale error). The written checkpoint opens in evaluate and
    layer_sim."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    from nca_interp import evaluate, grad_align, layer_sim, param_delta, patching
    from nca_interp.assets import embedded

    root = Path(__file__).resolve().parents[2]
    base = str(embedded("sokoban_base"))
    # the plan context: prompts of different lengths, so each process pads its rows otherwise
    # (under TRL's default bf16 autocast that alone moved the update by 0.5%)
    argv = ["--student", base, "--method", "nca", "--steps", "1", "--batch", "4", "--greedy",
            "true", "--optim", "sgd", "--lr", "0.01", "--clip", "0", "--context", "plan"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    runs = {}
    for name, launcher in (("one", [sys.executable, "-m", "train.trl_distill"]),
                           ("two", [sys.executable, "-m", "torch.distributed.run",
                                    "--standalone", "--nproc-per-node", "2", "-m",
                                    "train.trl_distill"])):
        out = tmp_path / name
        proc = subprocess.run([*launcher, *argv, "--out", str(out)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = out
    assert json.loads((runs["two"] / "run_config.json").read_text())["processes"] == 2
    init = load_file(Path(base) / "model.safetensors")
    a, b = (load_file(runs[n] / "model.safetensors") for n in ("one", "two"))
    da = torch.cat([(a[k] - init[k]).flatten() for k in a])
    db = torch.cat([(b[k] - init[k]).flatten() for k in a])
    assert da.norm() > 1e-4  # it trained
    assert float(db @ da / (da @ da)) == pytest.approx(1.0, abs=1e-3)  # the same scale
    for k in a:  # the tolerance of the package's own DDP test (tests/integration/test_ddp.py)
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)
    rep = evaluate.run([str(runs["two"])], context="plan", n_levels=20)
    assert set(rep["results"]) == {"two"}
    ls = layer_sim.run([str(runs["two"])], n_levels=4, baselines=False)
    assert len(ls["results"]["two"]["cos"]) == 5
    # every other analysis opens it too (its run config names its student and teacher)
    pd = param_delta.run([str(runs["one"]), str(runs["two"])])
    assert pd["comparison"]["global_cos"] > 0.99  # two processes moved as one did
    ga = grad_align.run([str(runs["two"])], batch=4, micro_batch=2, parts=2)
    assert set(ga["results"]) == {"two"}
    pt = patching.run(str(runs["two"]), n_levels=8, max_cases=2, ks=(1,), n_random=2,
                      n_random_generate=0)
    assert pt["results"]["two"]["checkpoint"] == str(runs["two"])


def test_without_trl_the_command_says_what_to_install(monkeypatch, capsys):
    """No traceback when the optional extra is missing: one line naming the extra, exit 1."""
    import sys

    from nca_interp.cli import entry
    from train import trl_distill

    monkeypatch.setitem(sys.modules, "nca_interp.trl_nca", None)  # import fails
    assert entry(trl_distill.main, ["--student", "nca_interp/assets/sokoban_base"]) != 0
    err = capsys.readouterr().err
    assert "nca_interp[trl]" in err and "Traceback" not in err


def test_an_out_that_holds_anything_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """Probe 11 L-A: the command replaced whatever --out named (a user's files, a finished run,
    a run still training, the current folder, the student itself) and exited 0. Each is now
    refused in one line before any model is read, and nothing there changes."""
    import hashlib

    from nca_interp.checkpoint import save_checkpoint
    from nca_interp.cli import entry
    from nca_interp.tokenizer import CHARS, build_char_tokenizer
    from tests.conftest import tiny
    from train import trl_distill

    tok = build_char_tokenizer(CHARS)
    student = save_checkpoint(tmp_path / "runs" / "student", tiny(tok), tok, {"task": "sokoban"})
    user = tmp_path / "userdir"
    (user / "sub").mkdir(parents=True)
    (user / "thesis.txt").write_text("my thesis draft")
    (user / "sub" / "d.jsonl").write_text("data")
    empty_cwd = tmp_path / "cwd"
    empty_cwd.mkdir()

    def sums() -> dict:
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in tmp_path.rglob("*") if p.is_file()}

    before = sums()
    capsys.readouterr()  # the fixture's save progress
    loaded = []
    monkeypatch.setattr(trl_distill, "load_checkpoint", lambda *a, **k: loaded.append(a))
    for out, said in ((user, "already holds sub, thesis.txt"),
                      (student, "is --student"), (student.parent, "contains --student"),
                      (user / "sub" / "x", "already holds"),  # its .trl sibling: a new name
                      (empty_cwd, "the current folder")):
        if out == user / "sub" / "x":
            (user / "sub" / "x.trl").mkdir()
            (user / "sub" / "x.trl" / "keep").write_text("mine")
            before = sums()
        monkeypatch.chdir(empty_cwd)
        assert entry(trl_distill.main, ["--student", str(student), "--out", str(out),
                                        "--steps", "1"]) == 2, out
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert loaded == [] and sums() == before


def test_the_context_return_callback_logs_what_evaluate_measures(tok, tmp_path):
    """Inside trainer.train(): every step the callback logs the context return of the live
    student through the trainer's loggers, and each logged number equals
    `nca_interp.evaluate --control` on the checkpoint the trainer saved at that step."""
    from nca_interp import evaluate
    from nca_interp.assets import embedded
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.trl_callbacks import ContextReturnCallback
    from nca_interp.trl_nca import NCADistillationConfig, NCADistillationTrainer

    task = make_task("sokoban")
    # a trained student, so that the numbers are not all 0: the embedded Sokoban base (it wins
    # most levels and reads the plan), distilled on-policy from itself
    student, stok = load_checkpoint(embedded("sokoban_base"))
    teacher, _ = load_checkpoint(embedded("sokoban_base"))
    args = NCADistillationConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
        max_completion_length=8, use_cpu=True, report_to=[], max_steps=2, logging_steps=1,
        save_strategy="steps", save_steps=1, seed=0, learning_rate=0.003, nca_beta=1.0)
    trainer = NCADistillationTrainer(model=student.train(), teacher_model=teacher, args=args,
                                     train_dataset=dataset(), processing_class=stok)
    cb = ContextReturnCallback(task, context="plan", every=1, n_items=24, trainer=trainer)
    trainer.add_callback(cb)
    trainer.train()
    assert [h["step"] for h in cb.history] == [1, 2]
    logged = [r for r in trainer.state.log_history if "context_return/correct_c" in r]
    assert len(logged) == 2 and all("context_return/reads_c" in r for r in logged)
    for h in cb.history:
        ckpt = tmp_path / "out" / f"checkpoint-{h['step']}"
        rep = evaluate.run([str(ckpt)], task="sokoban", context="plan", n_levels=24,
                           control=True)["results"][ckpt.name]
        assert 0 < rep["correct_no_c"] < 1 and rep["control"]["reads_c"] > 0  # a real signal
        for k in ("correct_no_c", "correct_c", "harm", "help", "both", "rel_len", "regime"):
            assert h[k] == rep[k], (h["step"], k)
        assert h["reads_c"] == rep["control"]["reads_c"]
        assert h["harm_baseline"] == pytest.approx(1 - rep["correct_c"])
    assert cb.history[0]["kl_views"] != cb.history[1]["kl_views"]  # the student moved


def test_the_callback_rides_in_trls_own_sft_trainer(tmp_path):
    """The monitor is a plain `TrainerCallback`: inside TRL's own `SFTTrainer` (not the
    package's subclass) it logs the context return of the live model each step, and the logged
    numbers equal `nca_interp.evaluate --control` on the checkpoint saved at that step."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from nca_interp import evaluate
    from nca_interp.assets import embedded
    from nca_interp.checkpoint import load_checkpoint
    from nca_interp.trl_callbacks import ContextReturnCallback

    task = make_task("sokoban")
    student, tok = load_checkpoint(embedded("sokoban_base"))
    view = task.for_tokenizer(tok)
    ds = Dataset.from_list([{"prompt": view.prompt(lv), "completion": view.target(lv)}
                            for lv in task.levels("train", 16)])
    args = SFTConfig(output_dir=str(tmp_path / "sft"), per_device_train_batch_size=4,
                     max_steps=2, logging_steps=1, save_strategy="steps", save_steps=1,
                     report_to=[], use_cpu=True, learning_rate=3e-3, seed=0)
    trainer = SFTTrainer(model=student.train(), args=args, train_dataset=ds,
                         processing_class=tok)
    cb = ContextReturnCallback(task, context="plan", every=1, n_items=24, trainer=trainer)
    trainer.add_callback(cb)
    trainer.train()
    logged = [r for r in trainer.state.log_history if "context_return/correct_c" in r]
    assert [r["step"] for r in logged] == [h["step"] for h in cb.history] == [1, 2]
    for h in cb.history:
        ckpt = tmp_path / "sft" / f"checkpoint-{h['step']}"
        rep = evaluate.run([str(ckpt)], task="sokoban", context="plan", n_levels=24,
                           control=True)["results"][ckpt.name]
        for k in ("correct_no_c", "correct_c", "harm", "help", "rel_len", "regime"):
            assert h[k] == rep[k], (h["step"], k)
        assert h["reads_c"] == rep["control"]["reads_c"]
    assert cb.history[0]["correct_no_c"] != cb.history[1]["correct_no_c"]  # SFT moved the model


def test_the_monitor_measures_in_the_weights_precision_and_puts_the_wrapper_back():
    """accelerate's mixed precision (TRL's CPU default) swaps `model.forward` for one wrapped in
    bf16 autocast; inside `own_precision` the model runs its original fp32 forward, and after
    it the wrapper is back, so training goes on in the precision it chose."""
    from types import MethodType

    from nca_interp.trl_callbacks import own_precision

    model = torch.nn.Linear(4, 4)
    model._original_forward = model.forward
    model.forward = MethodType(torch.autocast("cpu", dtype=torch.bfloat16)(
        type(model).forward), model)
    wrapped = model.forward
    x = torch.randn(2, 4)
    assert model(x).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16), own_precision(model):
        assert model(x).dtype == torch.float32
    assert model.forward == wrapped and model(x).dtype == torch.bfloat16
