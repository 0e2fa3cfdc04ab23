"""The benchmark registry: each benchmark's name and the module holding its ``BenchmarkDefinition``.

A benchmark is one folder, ``benchmarks/<name>/``, and one row here. Its ``definition`` module
says everything the scheduler and the renderer worker need to know of it (``benchmarks.definition``:
spec section, plan, builder arguments, rendering, reported versions, pinned stack) and imports no
simulator; its adapter and builder are named there by module path and imported on first use, since
they import heavy packages (robosuite, MuJoCo, SAPIEN) that only some machines have. A worker
serving only `synthetic` never needs LIBERO installed, and `scheduler manifest build` loads one
builder, never episode code.

A benchmark that lives outside this repository registers the same way from its own package: an
entry point in the group ``evalfleet.benchmarks`` whose name is the benchmark's and whose value is
its definition module. Rows here take precedence over entry points of the same name.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from benchmarks.base import Benchmark, BenchmarkError
from benchmarks.definition import BenchmarkDefinition, Perturbation
from manifests import stacks, trials
from manifests.format import Manifest

# name -> the module whose ``DEFINITION`` describes the benchmark.
REGISTRY: dict[str, str] = {
    "libero": "benchmarks.libero.definition",
    "metaworld": "benchmarks.metaworld.definition",
    "robotwin": "benchmarks.robotwin.definition",
    "synthetic": "benchmarks.synthetic.definition",
}
ENTRY_POINT_GROUP = "evalfleet.benchmarks"

AnyDefinition = BenchmarkDefinition[Any]


@functools.cache
def registered() -> Mapping[str, str]:
    """Every benchmark this installation knows: the rows above, then installed entry points."""
    found = {point.name: point.value for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return {**found, **REGISTRY}


def names() -> list[str]:
    """The benchmark names, sorted: the spec's `benchmark` keys and the routes a worker can claim."""
    return sorted(registered())


@functools.cache
def definition(name: str) -> AnyDefinition:
    """The definition of ``name``; BenchmarkError for a name no row registers."""
    try:
        module = registered()[name]
    except KeyError:
        raise BenchmarkError(f"unknown benchmark {name!r}; known: {', '.join(names())}", field="benchmark") from None
    found = getattr(importlib.import_module(module.partition(":")[0]), "DEFINITION", None)
    if not isinstance(found, BenchmarkDefinition) or found.name != name:
        raise BenchmarkError(f"{module} holds no DEFINITION of benchmark {name!r}", field="benchmark")
    return found


def definitions() -> list[AnyDefinition]:
    """Every registered benchmark's definition, by name."""
    return [definition(name) for name in names()]


def adapter_class(name: str) -> type[Benchmark]:
    """Imports and returns the adapter class for ``name``; BenchmarkError if there is none."""
    adapter = definition(name).adapter_class()
    if not (isinstance(adapter, type) and issubclass(adapter, Benchmark)):
        raise BenchmarkError(f"{definition(name).adapter} is not a benchmark adapter", field="benchmark")
    return adapter


def manifest_builder(name: str) -> ModuleType:
    """Imports the manifest builder of ``name``; ImportError when its simulator is not installed."""
    return definition(name).builder_module()


def stack_computed(benchmark: str) -> tuple[str, ...]:
    """The entry fields ``benchmark``'s scan computes with the simulator; none for a benchmark this
    registry does not know (its whole entries must then be equal)."""
    return definition(benchmark).stack_computed if benchmark in registered() else ()


def trial_identity(manifest: Manifest) -> str:
    """The manifest's trials, whatever stack it was built under (``manifests.trials``)."""
    return trials.trial_identity(manifest, stack_computed(manifest.benchmark))


def perturbation(benchmark: str, setting: str) -> Perturbation | None:
    """The setting ``setting`` perturbs and along which axis; None where it perturbs nothing or
    the benchmark is not registered."""
    return definition(benchmark).perturbation(setting) if benchmark in registered() else None


def trial_fields(benchmark: str) -> tuple[str, ...]:
    """The entry fields that name a trial across a perturbation; none for an unregistered benchmark."""
    return definition(benchmark).trial_fields if benchmark in registered() else ()


# -- simulator stacks (manifests.stacks, with each benchmark's pins) -------------------------------


def pins(benchmark: str) -> stacks.Pins | None:
    """What ``benchmark``'s stack pins; None for one that pins nothing or that no row registers."""
    return definition(benchmark).pins if benchmark in registered() else None


def stack_id(benchmark: str, versions: Mapping[str, Any]) -> str:
    """The id of the stack ``versions`` describe for ``benchmark`` (``manifests.stacks.stack_id``)."""
    return stacks.stack_id(benchmark, pins(benchmark), versions)


def stack_label(benchmark: str, versions: Mapping[str, Any]) -> str:
    """The name of the stack a manifest was built under (``manifests.stacks.stack_label``)."""
    return stacks.stack_label(benchmark, pins(benchmark), versions)


def missing_pins(benchmark: str, versions: Mapping[str, Any]) -> list[str]:
    """The pinned distributions of ``benchmark`` that ``versions`` does not record."""
    return stacks.missing_pins(pins(benchmark), versions)


def installed_stacks() -> list[str]:
    """The ids of the stacks installed here: one per benchmark whose pinned distributions are all
    installed (none for a benchmark that is not, so a worker without LIBERO advertises nothing)."""
    found = []
    for each in definitions():
        if each.pins is None:
            continue
        try:
            found.append(stacks.stack_id(each.name, each.pins, stacks.installed_versions(each.pins)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def reported_packages() -> tuple[str, ...]:
    """The distributions whose versions a worker reports: every benchmark's, in registry order."""
    return tuple(dict.fromkeys(package for each in definitions() for package in each.reported_packages))
