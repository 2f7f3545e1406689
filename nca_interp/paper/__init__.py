"""The paper's pipeline: from nothing to a published setting (runs, reports, claims, pages).

    python -m nca_interp.paper.reproduce --task sokoban      # one setting, end to end
    python -m nca_interp.paper.report --write                # its page from the reports
    python -m nca_interp.paper.claims                        # every verdict, judged again

`settings` reads `settings.toml` (every preset and published setting) when first asked, never
at import; `layout` decides the file names of a setting's folder; `rules` is the rule book the
`claims` are judged by; `report`, `summary`, `referee`, `sweep` and `paper` write the pages.
Training itself is `train/` (`train.sft`, `train.distill`, `train.trl_distill`); the analyses
are `nca_interp.<analysis>`.
"""

__all__ = []
