"""Rendering LIBERO's cameras on demand, with the very images a render-every-step run shows.

On CPU, rendering is ~94% of an environment step, and a policy that runs 5 actions of a chunk sees
one observation in 5, often of one camera. Skipping the rest must not change a bit of what the
policy does see, and robosuite makes that subtle: every observable (camera images included) runs
its own sampling timer, advanced by each physics sub-step, and takes its sample at a sub-step that
timer picks, not necessarily the last of a control step (float drift moves it). The image a step
returns is the camera's latest sample, wherever it was taken. Disabling an observable, or forcing
an update, would shift the timers and change the images.

So nothing about the timers changes: each camera's sensor is wrapped (at the one place robosuite
creates it, which survives hard resets) and the wrapper renders only the sample that the next
observation will show, returning a blank image for the others. Which sample that is, is found
before the steps run: a copy of the camera's Observable with a counting sensor runs robosuite's own
``update`` for the sub-steps ahead, so the timer logic is robosuite's, not a re-implementation.
A blank never reaches a policy: :meth:`CameraGate.check` refuses an observation whose image was
not rendered.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from benchmarks.base import Image

# Sentinel target: render every sample (an observable whose timing cannot be predicted).
_EVERY_SAMPLE = -1


class CameraGate:
    """Decides, sample by sample, which camera renders in one environment (kept across resets)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self._robosuite = env.env
        self._blank: dict[str, Image] = {}
        # Planned mode: camera -> the number of the sample to render (0: no sample ahead).
        self._targets: dict[str, int] = {}
        self._samples: dict[str, int] = {}
        # Whether each camera's latest sample was rendered (not blank).
        self._rendered: dict[str, bool] = {}
        self._wrap_camera_sensors()

    def skip(self) -> None:
        """Renders nothing until the next plan (``reset()``, whose images the forced update after it replaces)."""
        self._targets = {}

    def render_every_sample(self, cameras: Collection[str]) -> None:
        """Renders every sample of ``cameras`` (a forced update, e.g. ``set_init_state``)."""
        self._targets = dict.fromkeys(cameras, _EVERY_SAMPLE)
        self._samples = dict.fromkeys(cameras, 0)

    def plan(self, cameras: Collection[str], env_steps: int) -> None:
        """Renders, of each camera in ``cameras``, only its last sample within the next ``env_steps`` steps."""
        suite = self._robosuite
        substeps = env_steps * int(suite.control_timestep / suite.model_timestep)
        self._targets = {camera: self._last_sample(camera, substeps, suite.model_timestep) for camera in cameras}
        self._samples = dict.fromkeys(cameras, 0)

    def check(self, cameras: Collection[str]) -> None:
        """Raises unless the latest sample of every camera in ``cameras`` was rendered."""
        blank = [camera for camera in cameras if not self._rendered.get(camera, False)]
        if blank:
            raise RuntimeError(f"on-demand rendering left cameras {blank} unrendered at an observation")

    def _last_sample(self, camera: str, substeps: int, timestep: float) -> int:
        """The number of the last sample ``camera``'s observable takes in the next ``substeps``
        sub-steps, found by running robosuite's ``update`` on a copy of it with a counting sensor."""
        from robosuite.utils.observables import NO_CORRUPTION, NO_DELAY, NO_FILTER

        observable = self._robosuite._observables[f"{camera}_image"]
        if (observable._delayer, observable._corrupter, observable._filter) != (NO_DELAY, NO_CORRUPTION, NO_FILTER):
            return _EVERY_SAMPLE  # a delayer may draw random numbers: no copy may run it
        taken = 0

        def counting(obs_cache: dict[str, Any]) -> float:
            nonlocal taken
            taken += 1
            return 0.0

        probe = copy.copy(observable)
        probe._sensor = counting
        for _ in range(substeps):
            probe.update(timestep=timestep, obs_cache={}, force=False)
        return taken

    def _wrap_camera_sensors(self) -> None:
        """Wraps robosuite's camera sensor factory on this environment, so that every sensor a
        (hard) reset creates is gated; the sensors of the first reset are created through it too."""
        suite = self._robosuite
        create = suite._create_camera_sensors

        def gated_sensors(
            cam_name: str, cam_w: int, cam_h: int, cam_d: bool, cam_segs: Any, modality: str = "image"
        ) -> tuple[list[Callable[..., Any]], list[str]]:
            sensors, names = create(
                cam_name, cam_w=cam_w, cam_h=cam_h, cam_d=cam_d, cam_segs=cam_segs, modality=modality
            )
            if cam_d or cam_segs is not None:
                raise RuntimeError(f"camera {cam_name}: on-demand rendering handles RGB cameras only")
            self._blank[cam_name] = np.zeros((cam_h, cam_w, 3), dtype=np.uint8)
            return [self._gated(cam_name, sensors[0]), *sensors[1:]], names

        suite._create_camera_sensors = gated_sensors

    def _gated(self, camera: str, render: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        def sensor(obs_cache: dict[str, Any]) -> Any:
            target = self._targets.get(camera)
            if target is not None:
                self._samples[camera] += 1
                if target in (_EVERY_SAMPLE, self._samples[camera]):
                    self._rendered[camera] = True
                    return render(obs_cache)
            self._rendered[camera] = False
            return self._blank[camera]

        sensor.__modality__ = render.__modality__  # type: ignore[attr-defined]  # robosuite's @sensor mark
        return sensor
