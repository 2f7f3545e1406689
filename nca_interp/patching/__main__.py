import sys

from nca_interp.cli import entry
from nca_interp.patching import main

__all__ = []

sys.exit(entry(main))
