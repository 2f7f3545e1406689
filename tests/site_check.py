"""Open every page of the built docs site in headless Chromium, offline, at 1400 px, and check
that it opened, that every image loaded, and that no table is cut off horizontally (a table
wider than the page must sit in a box that scrolls, not one that clips). `make check-site`.

    python tests/site_check.py site/            # a site built by `make docs`

Needs Debian's chromium (`apt-get install -y chromium`). The browser runs with networking
off (a dead proxy), so a page that needs an outside host fails here. The pages are checked in
a copy of the site with a small script added to each; the site itself is not touched.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.browser_check import FLAGS, chromium

WIDTH = 1400

# Runs after the page and its images loaded; writes what it found into the DOM, which
# --dump-dom returns.
PROBE = """<script>
window.addEventListener("load", function () {
  var broken = [], clipped = [];
  document.querySelectorAll("img").forEach(function (img) {
    if (!img.complete || img.naturalWidth === 0) broken.push(img.getAttribute("src"));
  });
  var page = document.documentElement.clientWidth;
  document.querySelectorAll("table").forEach(function (t, i) {
    var right = t.getBoundingClientRect().right, scrolls = false, cut = false;
    for (var el = t.parentElement; el && el !== document.body; el = el.parentElement) {
      var ox = getComputedStyle(el).overflowX;
      if ((ox === "auto" || ox === "scroll") && el.scrollWidth > el.clientWidth) scrolls = true;
      if ((ox === "hidden" || ox === "clip") && el.scrollWidth > el.clientWidth + 1) cut = true;
    }
    if (cut || (right > page + 1 && !scrolls)) clipped.push(i);
  });
  var out = document.createElement("pre");
  out.id = "site-check";
  out.textContent = JSON.stringify({broken: broken, clipped: clipped});
  document.body.appendChild(out);
});
</script>"""


def probed_copy(site: Path, into: Path) -> list[Path]:
    """Copy the site into `into` with PROBE before each page's </body>; the copied pages."""
    shutil.copytree(site, into, dirs_exist_ok=True)
    pages = sorted(p for p in into.rglob("*.html") if "</body>" in p.read_text(errors="ignore"))
    for p in pages:
        text = p.read_text()
        i = text.rindex("</body>")
        p.write_text(text[:i] + PROBE + text[i:])
    return pages


def check(page: Path) -> tuple[Path, list[str]]:
    """(page, problems): empty when it opened, every image loaded and no table is cut."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},900",
               "--dump-dom", page.resolve().as_uri()]
        try:
            dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
        except subprocess.TimeoutExpired:
            return page, ["timed out"]
    m = re.search(r'<pre id="site-check">(.*?)</pre>', dom, re.S)
    if not m:
        return page, ["did not finish loading offline (no probe result)"]
    found = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    problems = [f"image not loaded: {src}" for src in found["broken"]]
    problems += [f"table {i} cut off at {WIDTH} px" for i in found["clipped"]]
    return page, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("site", nargs="?", default="site")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").exists():
        raise SystemExit(f"error: {site} is not a built site (no index.html); run `make docs`")
    with tempfile.TemporaryDirectory() as tmp:
        pages = probed_copy(site, Path(tmp) / "site")
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(check, pages))
        bad = [(p.relative_to(Path(tmp) / "site"), why) for p, why in results if why]
    for p, why in bad:
        print(f"FAILED {p}: {'; '.join(why)}")
    print(f"{len(pages) - len(bad)} of {len(pages)} pages opened offline at {WIDTH} px with "
          "every image loaded and no table cut off")
    return 1 if bad or not pages else 0


if __name__ == "__main__":
    sys.exit(main())
