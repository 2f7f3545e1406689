"""mkdocs hooks (mkdocs.yml `hooks:`): a setting page (any page of docs/, for example
docs/results/sokoban_long.md or docs/own_data.md) is `--8<-- "figures/<setting>/README.md"`,
the report `python -m nca_interp.paper.report` writes beside that setting's figures. The page
gets that report with its figure links pointing into the site, and the figures (PNG,
interactive HTML, and figures/plotly.min.js, the one bundle every HTML loads by a relative
link) are added to the site, so a setting page shows its figures and the strict build can check
every link."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

SETTING_PAGE = re.compile(r'^--8<-- "figures/([\w-]+)/README.md"\s*$', re.MULTILINE)
LOCAL_LINK = re.compile(r"\]\((?!https?:|/|#|\.\.)([\w.-]+\.(?:png|html))\)")
SHIPPED = (".png", ".html", ".js")


def _root(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _settings(config) -> list[str]:
    pages = Path(config["docs_dir"]).rglob("*.md")
    return sorted({m for p in pages for m in SETTING_PAGE.findall(p.read_text())})


def on_files(files, config):
    root = _root(config)
    if (root / "figures" / "plotly.min.js").is_file():  # the shared bundle (nca_interp.plots)
        files.append(File("figures/plotly.min.js", str(root), config["site_dir"],
                          config["use_directory_urls"]))
    for name in _settings(config):
        for f in sorted((root / "figures" / name).iterdir()):
            if f.suffix in SHIPPED:
                files.append(File(f"figures/{name}/{f.name}", str(root), config["site_dir"],
                                  config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    root = _root(config)

    up = "../" * page.file.src_uri.count("/")  # results/x.md: ../figures; own_data.md: figures

    def include(m: re.Match) -> str:
        name = m.group(1)
        text = (root / "figures" / name / "README.md").read_text()
        return LOCAL_LINK.sub(lambda link: f"]({up}figures/{name}/{link.group(1)})", text)

    return SETTING_PAGE.sub(include, markdown)
