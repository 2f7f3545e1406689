"""Any architecture TransformerLens 4's bridge has an adapter for: every analysis and
train.distill on tiny random models of ten families, each built here from a transformers
config (no hub); an architecture that cannot be analysed gets one line naming the folder."""

import pytest
import torch

from nca_interp import evaluate, grad_align, layer_sim, param_delta, patching
from nca_interp.checkpoint import CheckpointError, save_checkpoint
from nca_interp.names import module_of

TASK = {"name": "sokoban", "fmt": "compact", "dim_room": [6, 6], "num_boxes": 1}
SIZE = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    "llama": {}, "qwen2": {}, "qwen3": {"head_dim": 8}, "mistral": {}, "phi3": {},
    "gemma2": {"head_dim": 8}, "gemma3_text": {"head_dim": 8}, "olmo2": {},
    "gpt2": "gpt2", "gpt_neox": "gpt_neox",
}


def build(family: str, seed: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    extra = FAMILIES[family]
    if extra == "gpt2":
        cfg = AutoConfig.for_model("gpt2", vocab_size=256, n_embd=32, n_layer=2, n_head=4,
                                   n_positions=256, bos_token_id=1, eos_token_id=2)
    elif extra == "gpt_neox":
        kw = {k: v for k, v in SIZE.items() if k != "num_key_value_heads"}
        cfg = AutoConfig.for_model("gpt_neox", **kw)
    else:
        cfg = AutoConfig.for_model(family, **SIZE, **extra)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tok, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    base = save_checkpoint(root / "base", build(request.param, 0), tok, {"task": TASK})
    runs = {m: save_checkpoint(root / m, build(request.param, s), tok,
                               {"task": TASK, "student": str(base), "method": m, "seed": 0,
                                "context": "plan"})
            for m, s in (("opd", 1), ("nca", 2))}
    return request.param, root, base, runs


def test_every_analysis_runs_on_the_family(family):
    name, root, base, runs = family
    opd, nca = str(runs["opd"]), str(runs["nca"])
    ev = evaluate.run([opd], n_levels=4, control=True)
    assert ev["results"]["opd"]["n"] == 4
    ls = layer_sim.run([opd, nca], n_levels=4)
    layers = ls["layers"]
    assert len(layers) >= 3  # embeddings and both blocks
    pd = param_delta.run([opd, nca], init=str(base))
    assert pd["comparison"]["global_cos"] is not None
    r = pd["results"][opd]
    assert {k.split(".")[0] for k in r["rel"] if k[0].isdigit()} == {"0", "1"}  # both blocks
    assert param_delta.figures(pd)  # the layer x module grids draw
    ga = grad_align.run([opd], batch=4, micro_batch=2, parts=2)
    assert set(ga["results"]["opd"]["global"]["norm"]) == {"opd", "nca", "ctx"}
    pt = patching.run([opd], n_levels=8, max_cases=2, ks=[1], n_random=2, n_random_generate=0,
                      scope="groups", kind="help")
    assert pt["results"]


def test_patching_reruns_from_the_hooked_layer_as_the_full_forward_does(family, tok):
    """The rerun of blocks l.. equals the full forward for every family; where a family cannot
    be rerun exactly (Gemma 2 soft-caps its logits after the unembedding) it falls back to the
    full forward, and says so."""
    from nca_interp.hooks import boot_bridge
    from nca_interp.patching.rerun import Rerun

    name, root, base, runs = family
    bridge = boot_bridge(runs["opd"])
    torch.manual_seed(0)
    ids = torch.randint(3, 200, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding
    run = Rerun(bridge, ids, mask)
    assert run.exact == (name != "gemma2"), name

    def scaled(act, hook):
        return act * 1.5

    for li in range(bridge.cfg.n_layers):
        for hook in (f"blocks.{li}.hook_resid_post", f"blocks.{li}.attn.hook_pattern"):
            with torch.no_grad():
                want = bridge.run_with_hooks(ids, attention_mask=mask,
                                             fwd_hooks=[(hook, scaled)])[:, -1]
            bridge.reset_hooks()
            assert torch.allclose(run.logits([(hook, scaled)]), want, atol=1e-5), (name, hook)

    def last_five(act, hook):  # changes only the last five columns (a patch's right end)
        act[:, -5:] = act[:, -5:] * 1.5
        return act

    for li in range(bridge.cfg.n_layers):
        hook = [(f"blocks.{li}.hook_resid_post", last_five)]
        with torch.no_grad():
            want = bridge.run_with_hooks(ids, attention_mask=mask, fwd_hooks=hook)[:, -1]
        bridge.reset_hooks()
        # the columns left of the change rerun from the kept keys and values, or (a family
        # the cut does not fit) every column: the same logits either way
        assert torch.allclose(run.logits(hook, first=12 - 5), want, atol=1e-5), (name, li)
    print(name, "column cut:", run.suffix)


def test_a_soft_cap_small_logits_hide_still_sends_patching_to_the_full_forward(tok, tmp_path):
    """Gemma 2 soft-capped at 100: at an untrained model's logits (|l| < 1) the cap changes them
    by < 1e-5, so the clean rerun agrees; pushed to |200| it does not, and the rerun is not
    used."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from nca_interp.hooks import boot_bridge
    from nca_interp.patching.rerun import Rerun

    cfg = AutoConfig.for_model("gemma2", **SIZE, head_dim=8, final_logit_softcapping=100.0)
    torch.manual_seed(0)
    folder = save_checkpoint(tmp_path / "g", AutoModelForCausalLM.from_config(cfg), tok,
                             {"task": TASK})
    bridge = boot_bridge(folder)
    ids = torch.randint(3, 200, (2, 10))
    run = Rerun(bridge, ids, torch.ones_like(ids))
    assert float(run.clean.abs().max()) < 5 and not run.exact


def test_train_distill_runs_on_the_family(family, tmp_path):
    from train import distill

    name, root, base, runs = family
    distill.main(["--student", str(base), "--out", str(tmp_path / "run"), "--method", "nca",
                  "--batch", "4", "--steps", "1", "--eval-every", "100", "--eval-levels", "2",
                  "--threads", "1"])
    assert (tmp_path / "run" / "checkpoints" / "step_000001").is_dir()


@pytest.mark.parametrize("param, want", [
    ("transformer.h.1.attn.c_attn.weight", (1, "c_attn")),
    ("transformer.wte.weight", (None, "embed")),
    ("gpt_neox.layers.0.attention.query_key_value.weight", (0, "query_key_value")),
    ("gpt_neox.embed_in.weight", (None, "embed")), ("embed_out.weight", (None, "lm_head")),
    ("transformer.ln_f.weight", (None, "final_norm")),
    ("model.layers.3.self_attn.k_proj.weight", (3, "k_proj")),
])
def test_module_names_of_other_families(param, want):
    assert module_of(param) == want


def test_an_architecture_that_cannot_be_analysed_is_one_line(tok, tmp_path):
    from transformers import BertConfig, BertModel

    from nca_interp.checkpoint import load_checkpoint

    folder = tmp_path / "my_bert"
    BertModel(BertConfig(vocab_size=256, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64)).save_pretrained(folder)
    tok.save_pretrained(folder)
    with pytest.raises(CheckpointError,
                       match=rf"{folder}: model_type 'bert' \(BertModel\) is not a causal"):
        load_checkpoint(folder)


def test_a_causal_lm_without_a_bridge_adapter_is_one_line(tmp_path):
    import json

    from nca_interp.checkpoint import check_architecture

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlnet",
                                                      "architectures": ["XLNetLMHeadModel"]}))
    with pytest.raises(CheckpointError, match=rf"{tmp_path}: XLNetLMHeadModel .* no adapter"):
        check_architecture(tmp_path)
