import sys

import nca_interp.patching as patching  # light: its names are imported on first use
from nca_interp.cli import entry, parse_early
from nca_interp.configs import PatchingConfig

__all__ = []

# --help and a bad flag answered before torch is imported
PARSED = parse_early(PatchingConfig, patching.__doc__, positional="ckpt")
sys.exit(entry(patching.main, parsed=PARSED))
