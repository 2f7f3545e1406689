"""The pipeline records each stage as the command a user types, and a stage recorded that way is
up to date again: patching's body lives in nca_interp.patching.command, and recording that module
made every published patching stage read as changed and run again (session 44)."""

from nca_interp.configs import PatchingConfig
from nca_interp.paper import reproduce


def test_patching_is_recorded_and_recognised_as_python_m_nca_interp_patching(tmp_path, capsys):
    from nca_interp.patching import execute

    out = tmp_path / "patching.json"
    ran = []

    def fake(cfg):  # patching's execute, without its work
        ran.append(cfg)
        out.write_text("{}")

    fake.__module__ = execute.__module__  # where the command's body is defined
    cfg = PatchingConfig(ckpt=[str(tmp_path / "a")], out=str(tmp_path / "patching"))
    manifest = reproduce.Manifest(tmp_path / "manifest.json", reproduce.ReproduceConfig())
    reproduce.stage("patching", manifest, [out], fake, cfg)
    recorded = manifest.data["files"][str(out)]["command"]
    assert recorded.startswith("python -m nca_interp.patching "), recorded
    reproduce.stage("patching", manifest, [out], fake, cfg)  # the same config again: kept
    assert len(ran) == 1
    assert "[skip] patching" in capsys.readouterr().out
