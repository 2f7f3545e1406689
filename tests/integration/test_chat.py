"""Checkpoints whose tokenizer carries a chat template: prompts go through the template with
identical settings for both views, and responses are parsed in the chat format."""

import pytest
import torch

from nca_interp.checkpoint import load_checkpoint
from nca_interp.evaluate import evaluate_checkpoint
from nca_interp.layer_sim import layer_similarity
from nca_interp.masks import context_token_mask
from nca_interp.models import ModelConfig, build_model
from nca_interp.rollout import stop_ids
from nca_interp.tasks import make_task

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>\n{% endif %}"
    "{% endif %}")


@pytest.fixture(scope="module")
def chat_folders(tmp_path_factory):
    from nca_interp.tokenizer import build_char_tokenizer

    root = tmp_path_factory.mktemp("chat")
    out = {}
    for arch in ("qwen3", "llama"):
        tok = build_char_tokenizer()
        tok.chat_template = TEMPLATE
        model = build_model(ModelConfig(arch, 2, 32, 4, 2, 64, max_len=512), tok)
        model.generation_config.eos_token_id = [tok.eos_token_id, tok.convert_tokens_to_ids("}")]
        model.save_pretrained(root / arch)
        tok.save_pretrained(root / arch)
        out[arch] = root / arch
    return out


def test_both_views_use_the_template_with_the_same_settings(chat_folders):
    _, tok = load_checkpoint(chat_folders["qwen3"])
    task = make_task("sokoban").for_tokenizer(tok)
    level = task.level(0)
    c = task.context(level, "plan")
    x, cx = task.prompt(level), task.prompt(level, c)
    assert task.fmt == "textarena" and c.startswith("The first optimal moves are: [")
    for view in (x, cx):
        assert view.startswith("<|user|>\n") and view.endswith("<|assistant|>\n<think></think>\n")
        assert "Current Board:" in view
    assert cx == x.replace("<|user|>\n", f"<|user|>\n{c}\n\n", 1)  # context inside the user turn
    system = make_task("sokoban").for_tokenizer(tok, context_as="system")
    assert system.prompt(level, c).startswith(f"<|system|>\n{c}\n<|user|>\n")
    thinking = make_task("sokoban").for_tokenizer(tok, template_kwargs=(("enable_thinking", True),))
    assert "<think>" not in thinking.prompt(level) and "<think>" not in thinking.prompt(level, c)


def test_no_template_keeps_the_compact_task(tok):
    task = make_task("sokoban")
    assert task.for_tokenizer(tok) is task


def test_chat_responses_parse_like_textarena(chat_folders):
    _, tok = load_checkpoint(chat_folders["llama"])
    task = make_task("frozenlake").for_tokenizer(tok)
    level = task.level(3)
    assert task.score(level, task.target(level)).won
    assert task.score(level, "Sure! " + task.target(level).upper()).won
    assert not task.score(level, "I refuse").parsed


def test_stop_ids_include_generation_config(chat_folders):
    model, tok = load_checkpoint(chat_folders["llama"])
    assert stop_ids(tok, model) == sorted({tok.eos_token_id, tok.convert_tokens_to_ids("}")})


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_evaluate_and_layer_sim_on_chat_checkpoints(chat_folders, arch):
    model, tok = load_checkpoint(chat_folders[arch])
    task = make_task("sokoban")
    report = evaluate_checkpoint(model, tok, task, "state", n_levels=4)
    assert report["n"] == 4 and 0 <= report["correct_c"] <= 1
    result = layer_similarity(chat_folders[arch], task, "state", task.levels("test", 3))
    assert len(result["cos"]) == model.config.num_hidden_layers + 1
    assert all(0 <= a <= 1 for a in result["ctx_attn"])


def test_context_mask_finds_the_context_inside_the_template(chat_folders):
    _, tok = load_checkpoint(chat_folders["qwen3"])
    task = make_task("sokoban").for_tokenizer(tok)
    level = task.level(1)
    c = task.context(level, "state")
    text = task.prompt(level, c)
    mask = context_token_mask(tok, text, c)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    picked = tok.decode([i for i, m in zip(ids, mask) if m])
    assert picked == c and not mask[0]
    with pytest.raises(ValueError, match="'absent context' is not in the prompt built with it: "
                       "the model's chat template drops or rewrites it.*context_as=user"):
        context_token_mask(tok, text, "absent context")  # probe 10's U-E: says why and what to do
    assert torch.tensor(mask).sum() == len(c)


def test_opcd_files_through_evaluate_and_distill(chat_folders, tmp_path):
    """OPCD-format local data on a chat checkpoint: the system prompt becomes the system
    message, answers are read from the last <answer> tag, and distillation runs on it."""
    from pathlib import Path

    from nca_interp import evaluate, runs
    from train import distill

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "opcd"
    opts = (f"train={fix / 'medmcqa_train.jsonl'},test={fix / 'medmcqa_test.jsonl'},"
            f"system_prompt={fix / 'medmcqa_system.txt'},max_new=24")
    folder = str(chat_folders["qwen3"])
    reports = evaluate.main([folder, "--task", "opcd", "--task-options", opts,
                             "--n-levels", "5", "--threads", "1"])["results"]
    (r,) = reports.values()
    assert r["n"] == 2 and r["metric"] == "accuracy"  # the whole two-question test file
    _, tok = load_checkpoint(folder)
    task = runs.task_for_checkpoints([folder], "opcd", options=opts.split(","))
    task = task.for_tokenizer(tok)
    q = task.levels("test", 1)[0]
    assert task.prompt(q, task.context(q, "system")).startswith(
        "<|system|>\nYou are a careful clinical assistant")
    distill.main(["--student", folder, "--task", "opcd", "--task-options", opts, "--out",
                  str(tmp_path / "d"), "--batch", "4", "--steps", "1", "--eval-every", "5",
                  "--save-every", "1", "--threads", "1", "--method", "nca"])
    with pytest.raises(ValueError, match="KEY=VALUE with KEY one of"):
        runs.task_for_checkpoints([folder], "opcd", options=["trian=x"])


def test_sft_trains_a_chat_checkpoint_inside_its_template(chat_folders, tmp_path):
    """train.sft from a checkpoint with a chat template (SmolLM2 playing Sokoban): prompts go
    through the template, responses are `[up]` words (a detour's words untrained, then a space),
    the run records the textarena task, and the trained folder keeps the template."""
    import json

    from train import sft

    _, tok = load_checkpoint(chat_folders["llama"])
    cfg = sft.parse_config(sft.SFTConfig, ["--contexts", "plan", "--batch", "16",
                                           "--p-detour", "0.5", "--p-no-context", "0"])
    recorded, trained = (t.for_tokenizer(tok) for t in sft.task_of(cfg))
    prompts, responses = sft.batch_for_step(trained, cfg, 0, set())
    levels = trained.sample_levels(f"train-{cfg.seed}-0", cfg.batch, set())
    assert all(p.startswith("<|user|>\nThe first optimal moves are: [") for p in prompts)
    detours = 0
    for (detour, untrained), (plan, train), lv in zip(*zip(*responses), levels):
        assert not untrained and train and plan.startswith("[")
        assert set(plan.split()) <= {"[up]", "[down]", "[left]", "[right]"}
        if detour:
            detours += 1
            assert detour.endswith("] ")  # then the optimal plan from where it led
            lv = recorded.game.advance(lv, recorded.parse(detour))
        assert plan == recorded.target(lv)
    assert 0 < detours < cfg.batch
    out = tmp_path / "sft_chat"
    sft.main(["--out", str(out), "--init", str(chat_folders["llama"]), "--contexts", "plan",
              "--steps", "2", "--batch", "4", "--eval-levels", "2", "--save-every", "2",
              "--threads", "1"])
    run = json.loads((out / "run_config.json").read_text())
    assert run["task"]["fmt"] == "textarena" and run["precision"] == "fp32"
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in log if "loss" in r)
    _, saved = load_checkpoint(out)
    assert saved.chat_template == tok.chat_template
