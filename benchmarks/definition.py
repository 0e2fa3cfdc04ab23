"""What a benchmark tells the rest of evalfleet about itself: the one object its registry row names.

The scheduler and the renderer worker name no benchmark. Whatever differs from one benchmark to
the next is a fact of the benchmark, read from its ``BenchmarkDefinition`` (in
``benchmarks/<name>/definition.py``): the section of an evaluation spec that selects its episodes
(``benchmark.<name>``), how many episodes that section plans before anything is built, the
arguments its manifest builder is called with, the manifests a spec imports rather than builds, how
it renders on a GPU, which package versions a worker reports for it, and the distributions its
simulator stack pins. A definition module imports no simulator: the scheduler reads every
definition to parse a spec, and only the builder or adapter a job needs loads the simulator.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from benchmarks.base import BenchmarkError
from manifests.format import Manifest
from manifests.stacks import Pins

# How a benchmark's simulator draws on a GPU: MuJoCo through EGL (the worker finds the GPU's EGL
# device), SAPIEN through Vulkan (the worker only narrows CUDA to the GPU), or not at all. On the
# CPU every benchmark renders in software (OSMesa for MuJoCo).
GpuRenderer = Literal["egl", "vulkan", "none"]


class SpecSection(BaseModel):
    """The base of a benchmark's spec section: unknown keys refused, nothing coerced, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Section = TypeVar("Section", bound=SpecSection)
# A spec's relative path made absolute against the spec file's folder.
Resolve = Callable[[str], Path]


@dataclass(frozen=True)
class Perturbation:
    """A setting that perturbs another (a LIBERO-PRO suite its standard suite): the setting it
    perturbs and the axis, by name ("swap", "lan", ...)."""

    base: str
    axis: str


@dataclass(frozen=True)
class BenchmarkDefinition(Generic[Section]):
    """One benchmark's facts; ``benchmarks.REGISTRY`` maps its name to the module that holds it.

    ``planned_episodes``, ``builder_arguments`` and ``imported`` are plain functions of the spec
    section, so a benchmark's folder says everything ``scheduler run`` does with its spec.
    """

    name: str
    # The spec's `benchmark.<name>` section (docs/specs.md describes its keys).
    section: type[Section]
    # "module:Class" of the episode adapter (a benchmarks.base.Benchmark), imported on first use.
    adapter: str
    # The module with `add_build_arguments(parser)` and `build_manifests(args)` behind
    # `scheduler manifest build <name>`; imported only when used (it may need the simulator).
    builder: str
    # Episodes the section asks for before its manifests are built; 0 where only a scan can say.
    # It may import the builder (ImportError where the simulator is absent).
    planned_episodes: Callable[[Section], int]
    # The builder's arguments for the section: one namespace per `manifest build` call it stands for.
    builder_arguments: Callable[[Section, Resolve], list[argparse.Namespace]]
    # Manifests the section imports instead of building (a published subset), verified each run;
    # None: the section's manifests are built.
    imported: Callable[[Section, Resolve], list[Manifest] | None] = lambda section, resolve: None
    # The adapter options the workers `scheduler run` starts get from the section (each one a
    # worker's `--adapter-option NAME.KEY=VALUE`): where the simulator's own code is, for example.
    worker_options: Callable[[Section, Resolve], Mapping[str, str]] = lambda section, resolve: {}
    # Builder options whose spec key has another name (``robotwin_root`` is ``root``).
    spec_keys: Mapping[str, str] = field(default_factory=dict)
    # Entry fields the scan computes with the simulator, so another stack records other values for
    # the same trial; the trial identity leaves them out (``manifests.trials``).
    stack_computed: tuple[str, ...] = ()
    gpu_renderer: GpuRenderer = "none"
    # What a user waits for while `scheduler run` builds the manifests, in words ("" to say nothing).
    build_duration: str = ""
    # Distributions whose installed versions a worker reports for this benchmark (with its own).
    reported_packages: tuple[str, ...] = ()
    # What the benchmark's simulator stack pins (``manifests.stacks``); None: it pins nothing.
    pins: Pins | None = None
    # The simulator stack overlay (``manifests.overlays``, `make stacks`) the benchmark's workers and
    # builds run on when a spec's `fleet.stack` names none: its simulator cannot share the
    # environment evalfleet installs. None: that environment's own.
    stack: str | None = None
    # `manifest import KIND` commands the benchmark offers: KIND -> (help, "module:function"), the
    # function taking the package's folder and returning its manifests.
    importers: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # The height and width a worker renders every camera of a manifest's episodes at, as the manifest
    # records it (a checkpoint sealed for the benchmark derives its camera sizes from it); None where
    # the manifest does not record it.
    camera_size: Callable[[Manifest], tuple[int, int] | None] = lambda manifest: None
    # The manifest's task as the benchmark's own harnesses number it (LIBERO's task id in its suite),
    # for results written in their shapes (``scheduler.eval_info``); None where it has no number.
    task_number: Callable[[Manifest], int | None] = lambda manifest: None
    # The setting a setting perturbs, and along which axis (``scheduler.robustness``); None for a
    # setting that perturbs nothing.
    perturbation: Callable[[str], Perturbation | None] = lambda setting: None
    # Entry fields that name a trial across a perturbation: a perturbed manifest whose entries
    # hold the same values, in the same order, as its base manifest's (same task) runs the same
    # trials perturbed, and its episodes pair with the base's. Empty: they never pair.
    trial_fields: tuple[str, ...] = ()

    def adapter_class(self) -> object:
        """The adapter class, imported now (``benchmarks.adapter_class`` checks it is one)."""
        adapter: object = _attribute(self.adapter)
        return adapter

    def builder_module(self) -> ModuleType:
        """The builder module, imported now; ImportError when the benchmark's simulator is absent."""
        return importlib.import_module(self.builder)

    def spec_key(self, option: str | None) -> str:
        """A builder option (``--trials``, ``robotwin_root``) as the spec's key (``benchmark.NAME.trials``)."""
        name = (option or "").removeprefix("--").replace("-", "_")
        renamed = self.spec_keys.get(name, name)
        return f"benchmark.{self.name}.{renamed}" if renamed else f"benchmark.{self.name}"

    def section_of(self, value: SpecSection) -> Section:
        """``value`` as this benchmark's section (the spec model holds it as the base type)."""
        if not isinstance(value, self.section):
            raise BenchmarkError(f"not a {self.name} section: {type(value).__name__}", field="benchmark")
        return value


def import_function(path: str) -> Callable[..., Any]:
    """``"module:function"`` imported now."""
    function: Callable[..., Any] = _attribute(path)
    return function


def _attribute(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
