"""The benchmark registry: each benchmark's adapter and manifest builder, by name.

Adapters and builders for real simulators import heavy packages (robosuite, MuJoCo, SAPIEN) that
only some machines have, so ``REGISTRY`` names each by module path and imports it on first use: a
worker serving only `synthetic` never needs LIBERO installed, and the scheduler's
``manifest build`` (``scheduler.cli.manifests``) loads a builder, never episode code, and only the
one asked for. Both read this one table, and so does `scheduler compare`: ``stack_computed`` names
the entry fields a benchmark's scan computes with the simulator (``manifests.trials``), which the
trial identity leaves out.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import cast

from benchmarks.base import Benchmark, BenchmarkError
from manifests import trials
from manifests.format import Manifest


@dataclass(frozen=True)
class Registered:
    """Where one benchmark's code lives, by module path."""

    adapter_module: str
    adapter_class_name: str
    # A module with `add_build_arguments(parser)` and `build_manifests(args)`, apart from the
    # adapter; None: the scheduler CLI builds the benchmark's manifests itself (synthetic).
    builder_module: str | None
    # Entry fields the scan computes with the simulator, so another stack records other values for
    # the same trial; the trial identity leaves them out (``manifests.trials``). Everything else in
    # an entry is a choice of the trial.
    stack_computed: tuple[str, ...] = ()


# LIBERO: the fixture poses and the solver warm start its reset left (benchmarks/libero/build.py),
# and the digest of the rendered first observation; RoboTwin: that digest.
REGISTRY: dict[str, Registered] = {
    "libero": Registered(
        "benchmarks.libero.adapter",
        "LiberoBenchmark",
        "benchmarks.libero.build",
        ("fixture_poses", "qacc_warmstart", "initial_observation_digest"),
    ),
    "robotwin": Registered(
        "benchmarks.robotwin.adapter",
        "RoboTwinBenchmark",
        "benchmarks.robotwin.build",
        ("initial_observation_digest",),
    ),
    "synthetic": Registered("benchmarks.synthetic.adapter", "SyntheticBenchmark", None),
}


def names() -> list[str]:
    """The benchmark names a worker can be asked to route."""
    return sorted(REGISTRY)


def adapter_class(name: str) -> type[Benchmark]:
    """Imports and returns the adapter class for ``name``; BenchmarkError if there is none."""
    try:
        registered = REGISTRY[name]
    except KeyError:
        raise BenchmarkError(f"unknown benchmark {name!r}; known: {', '.join(names())}", field="benchmark") from None
    module = importlib.import_module(registered.adapter_module)
    return cast("type[Benchmark]", getattr(module, registered.adapter_class_name))  # imported by name


def names_with_builder() -> list[str]:
    """The benchmarks whose manifests a builder module makes, in the registry's order."""
    return [name for name, registered in REGISTRY.items() if registered.builder_module is not None]


def manifest_builder(name: str) -> ModuleType:
    """Imports the manifest builder of ``name`` (one of ``names_with_builder()``); ImportError when its
    simulator is not installed."""
    module = REGISTRY[name].builder_module
    if module is None:
        raise BenchmarkError(f"benchmark {name!r} has no manifest builder module", field="benchmark")
    return importlib.import_module(module)


def stack_computed(benchmark: str) -> tuple[str, ...]:
    """The entry fields ``benchmark``'s scan computes with the simulator; none for a benchmark this
    registry does not know (its whole entries must then be equal)."""
    registered = REGISTRY.get(benchmark)
    return registered.stack_computed if registered is not None else ()


def trial_identity(manifest: Manifest) -> str:
    """The manifest's trials, whatever stack it was built under (``manifests.trials``)."""
    return trials.trial_identity(manifest, stack_computed(manifest.benchmark))
