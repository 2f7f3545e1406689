"""The docs' persona example (docs/examples/persona/run.sh) end to end at tiny sizes: the
hand-written OPD / NCA loop trains checkpoints nca_interp did not make, then every analysis
reads them with the shipped data, context and scorer, and the page is generated from their
JSON. Guards the walk-through in docs/own_data.md against drift."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nca_interp.checkpoint import save_checkpoint
from nca_interp.models import ModelConfig, build_model

HERE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "persona"
TEMPLATE = ("{% if messages[0]['role'] != 'system' %}<|system|>default<|end|>{% endif %}"
            "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.mark.example
def test_the_persona_example_runs_every_analysis_on_foreign_checkpoints(tok, tmp_path):
    tok.chat_template = TEMPLATE
    # characters as tokens: the persona and a prompt take ~250, so a window of 1024
    model = save_checkpoint(tmp_path / "model",
                            build_model(ModelConfig("llama", 2, 32, 4, 2, 64, 1024), tok), tok)
    (model / "nca_checkpoint.json").unlink()  # a plain HF folder, as a user's would be
    env = {**os.environ, "PY": sys.executable, "MODEL": str(model), "STEPS": "2",
           "THREADS": "1", "N_RANDOM": "2", "PNG": "", "OUT": str(tmp_path / "runs"),
           "FIG": str(tmp_path / "fig")}
    done = subprocess.run(["bash", str(HERE / "run.sh")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for method in ("opd", "nca", "opd_s1"):
        assert (tmp_path / "runs" / method / "model.safetensors").is_file()
    digest = hashlib.sha256((HERE / "prompts.jsonl").read_bytes()).hexdigest()
    ids = [json.loads(line)["id"] for line in (HERE / "prompts.jsonl").open()]
    test_ids = [i for i, line in zip(ids, (HERE / "prompts.jsonl").open())
                if json.loads(line)["split"] == "test"]
    for name in ("evaluate", "layer_sim", "grad_align", "param_delta", "patching"):
        report = json.loads((tmp_path / "fig" / f"{name}.json").read_text())
        assert report["figures"] or all("note" in r for r in report["results"].values()), name
        if name == "param_delta":
            continue
        data = report["data"] if name != "patching" else \
            next(iter(report["results"].values()))["data"]
        assert data["files"]["data"]["sha256"] == digest, name
        if name in ("evaluate", "layer_sim"):
            assert data["units"] == test_ids
    ev = json.loads((tmp_path / "fig" / "evaluate.json").read_text())
    assert set(ev["results"]) == {"model", "opd", "nca"}
    assert "parse_fail_no_c" in ev["results"]["opd"]
    # c' is the wrong persona the example hands over, named in the reports that use it
    wrong = (HERE / "wrong_persona.txt").read_text().strip()
    assert ev["results"]["opd"]["control"]["c_prime_source"] == "file"
    assert wrong[:40] in json.dumps(ev["results"]["opd"]["control"]["c_prime_examples"])
    lens = json.loads((tmp_path / "fig" / "lens.json").read_text())
    assert wrong[:40] in json.dumps(lens["control"])
    page = (tmp_path / "fig" / "README.md").read_text()
    for name in ("evaluate", "layer_sim", "grad_align", "param_delta", "patching", "lens"):
        assert f"### {name}" in page
