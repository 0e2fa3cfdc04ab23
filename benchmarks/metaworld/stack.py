"""Meta-World's pinned stack: the distributions that decide its physics, images and instructions.

Meta-World needs a MuJoCo 3 and the `libero` extra's environment has MuJoCo 2.3.7, so Meta-World
runs on an overlay `make stacks` builds (``manifests.overlays``): a worker started with
``--stack`` ``STACK``, and the builder with that overlay first on its path (`scheduler run` does
both for a Meta-World spec, ``DEFINITION.stack``).
"""

from __future__ import annotations

import importlib.metadata

from benchmarks.base import BenchmarkError
from manifests import stacks
from manifests.stacks import Pins

# MuJoCo's version moves Meta-World's physics and images; lerobot's holds the instructions.
PINS = Pins(distributions=("metaworld", "mujoco", "numpy", "gymnasium", "lerobot"), named=("metaworld", "mujoco"))
# The overlay `make stacks` builds with them (requirements/stacks/<this>.txt).
STACK = "metaworld-3.0.0_mujoco-3.3.7"


def installed_versions() -> dict[str, str]:
    """The pinned distributions' installed versions; BenchmarkError, saying how to get on the
    stack, where one is missing."""
    try:
        return stacks.installed_versions(PINS)
    except importlib.metadata.PackageNotFoundError as exc:
        raise BenchmarkError(
            f"{exc.name} is not installed here: Meta-World runs on the {STACK} stack "
            f"(`make stacks`; PYTHONPATH=.stacks/{STACK} for a build, `renderer-worker --stack {STACK}`)",
            field="stack",
        ) from None
