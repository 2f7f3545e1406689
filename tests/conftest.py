import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)
torch.set_flush_denormal(True)


@pytest.fixture(scope="session")
def tok():
    from nca_interp.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


def tiny(tok, arch="qwen3", seed=0, n_layers=2, d_model=32):
    from nca_interp.models import ModelConfig, build_model

    return build_model(ModelConfig(arch, n_layers, d_model, 4, 2, 64, 256), tok, seed)


@pytest.fixture
def tiny_model(tok):
    return tiny(tok)
