"""Training: a teacher by supervised fine-tuning (`train.sft`), OPD and NCA students
(`train.distill`), the same losses in TRL's trainer (`train.trl_distill`).

From a clone, run from the repository's root: `python -m train.sft --help`. The wheel
installs this folder inside the library, as `nca_interp.train` (`python -m
nca_interp.train.sft --help`), so `pip install` puts no top-level `train` package into
site-packages (it would shadow a user's own `train.py`); the modules import one another
relatively for that reason."""

__all__ = []
