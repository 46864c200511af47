"""Where the project's files are: one definition for every module that reads or writes them.

(The policy pack and programs/train.py keep their own: the pack runs standalone under `pulumi preview
--policy-pack policy`, and train.py runs inside containers from a copy of programs/ alone.)
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The Pulumi project directory (Pulumi.yaml, __main__.py, stacks/)."""
PROGRAMS = ROOT / "programs"
"""The programs shipped into containers and pods (train.py, gpucheck.py, preflight.py, ...)."""
