r"""Copy trained checkpoints into the package as the embedded defaults every command falls back
on (small: ~4 MB each), rewriting run-config paths to `embedded:NAME` references.

    python -m train.embed runs/sokoban_base=sokoban_base runs/sokoban_opd_s0=sokoban_opd \
        runs/sokoban_nca_s0=sokoban_nca
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, not a traceback
    from nca_interp.cli import quiet_interrupt

    quiet_interrupt()

import json
import shutil
import sys
import tempfile
from pathlib import Path

from nca_interp import checkpoint as ck
from nca_interp.assets import ROOT
from nca_interp.cli import entry
from nca_interp.fsio import read_json

__all__ = ["main"]


def embed(src: str, name: str, renames: dict[str, str]) -> Path:
    src_path = ck.verify_folder(src)
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        dst = Path(tmp) / name
        dst.mkdir()
        for f in src_path.iterdir():
            if f.is_file() and f.name not in (ck.MANIFEST, "metrics.jsonl") \
                    and not f.name.startswith("trainer_state"):
                shutil.copyfile(f, dst / f.name)
        cfg = read_json((dst / ck.RUN_CONFIG)) if (dst / ck.RUN_CONFIG).exists() \
            else {}
        for key in ("student", "teacher", "out"):
            if cfg.get(key) and str(Path(cfg[key]).resolve()) in renames:
                cfg[key] = "embedded:" + renames[str(Path(cfg[key]).resolve())]
        (dst / ck.RUN_CONFIG).write_text(json.dumps(cfg, indent=1))
        ck.write_manifest(dst)
        final = ROOT / name
        if final.exists():
            shutil.rmtree(final)
        dst.rename(final)
    return final


def main(argv: list[str] | None = None) -> None:
    pairs = [a.split("=", 1) for a in (argv if argv is not None else sys.argv[1:])]
    if not pairs or any(len(p) != 2 for p in pairs):
        raise SystemExit(__doc__)
    renames = {str(Path(src).resolve()): name for src, name in pairs}
    for src, name in pairs:
        print("embedded", embed(src, name, renames))


if __name__ == "__main__":
    sys.exit(entry(main))
