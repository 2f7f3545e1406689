"""Open every committed HTML figure in headless Chromium, offline, and check that plotly drew
it (the page's DOM holds plotly's `main-svg` after its scripts ran). `make check-figures`.

    python tests/browser_check.py [figures/ ...] [--shots DIR]   # DIR: a PNG per figure

Needs Debian's chromium (`apt-get install -y chromium`). The browser runs with networking
off, so a page that needs a CDN fails here.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--proxy-server=127.0.0.1:9", "--virtual-time-budget=8000"]


def chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise SystemExit("error: no chromium; install Debian's (`apt-get install -y chromium`)")
    return path


def rendered(page: Path, shot_dir: Path | None = None) -> tuple[Path, bool, str]:
    """(page, drawn?, why not)."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
               page.resolve().as_uri()]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
        except subprocess.TimeoutExpired:
            return page, False, "timed out"
        ok = 'class="main-svg"' in out or "class='main-svg'" in out
        if shot_dir is not None:
            shot = shot_dir / (str(page).replace("/", "__") + ".png")
            subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}",
                            f"--screenshot={shot}", "--window-size=1200,800",
                            page.resolve().as_uri()], capture_output=True, timeout=120)
    return page, ok, "" if ok else "no plotly svg in the DOM (script not loaded?)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="*", default=["figures"])
    ap.add_argument("--shots", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    pages = sorted(p for r in map(Path, args.roots)
                   for p in ([r] if r.is_file() else r.rglob("*.html")))
    shots = Path(args.shots) if args.shots else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda p: rendered(p, shots), pages))
    bad = [(p, why) for p, ok, why in results if not ok]
    for p, why in bad:
        print(f"NOT RENDERED {p}: {why}")
    print(f"{len(pages) - len(bad)} of {len(pages)} HTML figures rendered offline in headless "
          "chromium")
    return 1 if bad or not pages else 0


if __name__ == "__main__":
    sys.exit(main())
