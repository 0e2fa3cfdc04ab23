"""Benchmark adapters by name.

Adapters for real simulators import heavy packages (robosuite, MuJoCo, SAPIEN) that only some
machines have, so the registry names each adapter by module path and imports it on first use: a
worker serving only `synthetic` never needs LIBERO installed.
"""

from __future__ import annotations

import importlib
from typing import cast

from benchmarks.base import Benchmark, BenchmarkError

_ADAPTERS: dict[str, tuple[str, str]] = {
    "libero": ("benchmarks.libero.adapter", "LiberoBenchmark"),
    "robotwin": ("benchmarks.robotwin.adapter", "RoboTwinBenchmark"),
    "synthetic": ("benchmarks.synthetic.adapter", "SyntheticBenchmark"),
}


def names() -> list[str]:
    """The benchmark names a worker can be asked to route."""
    return sorted(_ADAPTERS)


def adapter_class(name: str) -> type[Benchmark]:
    """Imports and returns the adapter class for ``name``; BenchmarkError if there is none."""
    try:
        module_name, class_name = _ADAPTERS[name]
    except KeyError:
        raise BenchmarkError(f"unknown benchmark {name!r}; known: {', '.join(names())}", field="benchmark") from None
    return cast("type[Benchmark]", getattr(importlib.import_module(module_name), class_name))  # imported by name
