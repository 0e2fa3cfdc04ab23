"""The benchmark registry: each benchmark's adapter and manifest builder, by name.

Adapters and builders for real simulators import heavy packages (robosuite, MuJoCo, SAPIEN) that
only some machines have, so ``REGISTRY`` names each by module path and imports it on first use: a
worker serving only `synthetic` never needs LIBERO installed, and the scheduler's
``manifest build`` (``scheduler.cli.manifests``) loads a builder, never episode code, and only the
one asked for. Both read this one table.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import cast

from benchmarks.base import Benchmark, BenchmarkError


@dataclass(frozen=True)
class Registered:
    """Where one benchmark's code lives, by module path."""

    adapter_module: str
    adapter_class_name: str
    # A module with `add_build_arguments(parser)` and `build_manifests(args)`, apart from the
    # adapter; None: the scheduler CLI builds the benchmark's manifests itself (synthetic).
    builder_module: str | None


REGISTRY: dict[str, Registered] = {
    "libero": Registered("benchmarks.libero.adapter", "LiberoBenchmark", "benchmarks.libero.build"),
    "robotwin": Registered("benchmarks.robotwin.adapter", "RoboTwinBenchmark", "benchmarks.robotwin.build"),
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
