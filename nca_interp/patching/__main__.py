import sys

from nca_interp.cli import entry
from nca_interp.patching import main

sys.exit(entry(main))
