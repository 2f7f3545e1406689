"""nca_interp: train OPD / NCA students with privileged context and look inside them.

Importing it changes nothing in the process (no environment variable, no logging setting):
every load of weights is from a local folder by `local_files_only=True` at the call
(`nca_interp.checkpoint.load_checkpoint`, `nca_interp.fetch`), so nothing asks the hub
whatever HF_HUB_OFFLINE says."""

__all__ = []

__version__ = "0.1.0"
