import re
from dataclasses import dataclass, field

import pytest

from nca_interp import analysis
from nca_interp.cli import parse_config, to_dict
from tests.conftest import command_help


@dataclass
class Cfg:
    name: str = "a"
    n: int = 1
    x: float | None = None
    dims: tuple[int, ...] = (6, 6)
    items: list[str] = field(default_factory=lambda: ["p", "q"])
    flag: bool = False


def test_types_flags_and_round_trip():
    c = parse_config(Cfg, ["--n", "3", "--x", "0.5", "--dims", "8,8", "--items", "a,b", "--flag"])
    assert (c.n, c.x, c.dims, c.items, c.flag) == (3, 0.5, (8, 8), ["a", "b"], True)
    assert parse_config(Cfg, ["--x", "none", "--flag", "false"]).x is None
    assert not parse_config(Cfg, ["--flag", "false"]).flag
    assert Cfg(**{**to_dict(c), "dims": tuple(to_dict(c)["dims"])}) == c


def test_positional_list():
    c = parse_config(Cfg, ["u", "v"], positional="items")
    assert c.items == ["u", "v"]


ANALYSES = tuple(s.module for s in analysis.specs())
TRAINING = ("train.distill", "train.sft", "nca_interp.paper.reproduce")


@pytest.mark.parametrize("module", ANALYSES + TRAINING)
def test_help_names_the_command_states_defaults_once_and_fits_a_screen(module):
    out = command_help(module)
    assert out.startswith(f"usage: python -m {module} ")
    assert "(default: None)" not in out
    for entry in re.split(r"\n  -", out):  # one option's help
        assert len(re.findall(r"\(default: ", entry)) <= 1, entry
        assert not (re.search(r"\(default: ", entry) and re.search(r"[^(]default[: ]", entry)), \
            entry
    assert len(out.splitlines()) <= 60
    if module in TRAINING:  # the options for experts: counted in one line, listed by --help-all
        every = command_help(module, "--help-all")
        hidden = re.search(r"(\d+) options for experts .*: --help-all", out)
        assert hidden and "\n  --weight-decay" not in out \
            or module == "nca_interp.paper.reproduce", out
        flags = set(re.findall(r"^  (--[a-z-]+)", every, re.M))
        assert len(flags - set(re.findall(r"^  (--[a-z-]+)", out, re.M))) == int(hidden[1])
        return
    if module != "nca_interp.param_delta":  # the one analysis without a context
        # one list of context kinds for every command (nca_interp.tasks.CONTEXT_CHOICES)
        shown = re.sub(r"\s+", " ", out)
        assert "system (opcd, sysprompt)" in shown and "facts|rule" in shown, module
    assert not re.search(r"20\d\d-\d\d-\d\d|model hub", out)
    # example commands keep their line breaks (a docstring's backslash is not a continuation)
    assert not re.search(r"\S {4,}--", out.split("options:")[0]), out


def test_one_precision_flag_and_one_device_default():
    """Every command that takes a precision takes `--precision auto|fp32|bf16` (grad_align's old
    `--dtype` is gone), and every command that takes a device defaults to auto."""
    import dataclasses
    import importlib

    import torch

    from nca_interp.errors import UsageError
    from nca_interp.models import weights_dtype

    cpu = torch.device("cpu")
    assert weights_dtype(cpu, "auto") == weights_dtype(cpu, "fp32") == torch.float32
    assert weights_dtype(cpu, "bf16") == torch.bfloat16
    assert weights_dtype(torch.device("cuda"), "auto") == torch.bfloat16
    with pytest.raises(UsageError, match="--precision must be auto, fp32 or bf16"):
        weights_dtype(cpu, "float16")
    configs = {"nca_interp.layer_sim": "LayerSimConfig", "nca_interp.grad_align":
               "GradAlignConfig", "nca_interp.evaluate": "EvalConfig",
               "train.distill": "DistillConfig", "train.sft": "SFTConfig"}
    for module, name in configs.items():
        fields = {f.name: f for f in dataclasses.fields(getattr(importlib.import_module(module),
                                                                name))}
        assert "dtype" not in fields, module
        assert fields["device"].default == "auto", module
        if "precision" in fields:
            assert fields["precision"].default == "auto", module


def test_auto_precision_follows_native_bf16(monkeypatch):
    """`--precision auto` is bf16 on a GPU and on a CPU with native bf16, fp32 where the CPU
    emulates bf16 (several times slower than fp32 there); a run records what auto meant, and a run
    recorded with `auto` before that resumes in the precision auto meant then."""
    import torch

    from nca_interp import models
    from train.common import current_flags

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    for forced, want in (("0", "fp32"), ("1", "bf16")):
        monkeypatch.setenv("NCA_INTERP_NATIVE_BF16", forced)
        models.native_bf16.cache_clear()
        assert models.resolved_precision(cpu, "auto") == want
        assert models.autocast(cpu, "auto").__class__.__name__ == \
            ("autocast" if want == "bf16" else "nullcontext")
        assert models.resolved_precision(gpu, "auto") == "bf16"
        assert models.resolved_precision(cpu, "fp32") == "fp32"
    models.native_bf16.cache_clear()
    assert current_flags({"precision": "auto", "device": "cpu"})["precision"] == "fp32"
    assert current_flags({"precision": "auto", "device": "cuda"})["precision"] == "bf16"
    assert current_flags({"precision": "bf16", "device": "cpu"})["precision"] == "bf16"


def test_trl_config_bf16_follows_auto(monkeypatch):
    """NCADistillationConfig left unset follows `--precision auto`, not TRL's bf16-everywhere."""
    from nca_interp import models
    from nca_interp.trl_nca import NCADistillationConfig

    for forced in ("0", "1"):
        monkeypatch.setenv("NCA_INTERP_NATIVE_BF16", forced)
        models.native_bf16.cache_clear()
        args = NCADistillationConfig(output_dir="/tmp/unused", use_cpu=True, report_to=[])
        assert args.bf16 is (forced == "1")
    models.native_bf16.cache_clear()
