"""A double of EGL's device enumeration, then robosuite and MuJoCo for real: which EGL device do they open?

Run as ``python tests/egl_enumeration_double.py POSITION COUNT`` under a worker's render environment
(tests/test_egl_device.py). This machine has no GPU and one EGL device (Mesa's software renderer), so
it cannot show on its own that robosuite picks device k of n. The double replaces only
``eglQueryDevicesEXT`` in MuJoCo's ``mujoco.egl.egl_ext`` (the module both MuJoCo and robosuite list
devices through): it returns COUNT handles, the real device at POSITION and placeholders that no EGL
call accepts elsewhere, and records which position each display is opened on. Everything after it is
real: robosuite 1.4's import-time check of MUJOCO_EGL_DEVICE_ID against CUDA_VISIBLE_DEVICES, MuJoCo's
EGL display (made at ``import mujoco``), robosuite's own EGL context choosing its device, and a frame
rendered through robosuite's offscreen render context. A wrong choice lands on a placeholder and fails.

Prints one JSON line: the positions displays were opened on, and the rendered frame's shape.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
from pathlib import Path

POSITION, COUNT = int(sys.argv[1]), int(sys.argv[2])

# Load mujoco/egl/egl_ext.py on its own: importing the mujoco.egl package would open a display at once.
_mujoco = importlib.util.find_spec("mujoco")
assert _mujoco is not None and _mujoco.submodule_search_locations
_spec = importlib.util.spec_from_file_location(
    "mujoco.egl.egl_ext", Path(_mujoco.submodule_search_locations[0]) / "egl" / "egl_ext.py"
)
assert _spec is not None and _spec.loader is not None
egl_ext = importlib.util.module_from_spec(_spec)
sys.modules["mujoco.egl.egl_ext"] = egl_ext
_spec.loader.exec_module(egl_ext)

(_real,) = egl_ext.eglQueryDevicesEXT()[:1]  # Mesa lists its software device first
_placeholders = [ctypes.cast(ctypes.c_void_p(0x7E570000 + i), egl_ext.EGLDeviceEXT) for i in range(COUNT)]
HANDLES = [_real if i == POSITION else _placeholders[i] for i in range(COUNT)]
OPENED: list[int] = []
_get_platform_display = egl_ext.eglGetPlatformDisplayEXT


def _query_devices_double(max_devices: int = 10) -> list[object]:
    return list(HANDLES)


def _get_platform_display_recorded(platform: int, device: object, attributes: object) -> object:
    address = ctypes.cast(device, ctypes.c_void_p).value
    OPENED.append(next(i for i, h in enumerate(HANDLES) if ctypes.cast(h, ctypes.c_void_p).value == address))
    return _get_platform_display(platform, device, attributes)


egl_ext.eglQueryDevicesEXT = _query_devices_double
egl_ext.eglGetPlatformDisplayEXT = _get_platform_display_recorded

# From here on, nothing is a double.
from robosuite.renderers.context import egl_context  # noqa: E402
from robosuite.utils import binding_utils  # noqa: E402

assert binding_utils.GLContext is egl_context.EGLGLContext, binding_utils.GLContext
sim = binding_utils.MjSim.from_xml_string(
    '<mujoco><worldbody><light pos="0 0 2"/><geom size="0.2" rgba="1 0 0 1"/>'
    '<camera name="front" pos="0 -1 0" xyaxes="1 0 0 0 0 1"/></worldbody></mujoco>'
)
sim.add_render_context(binding_utils.MjRenderContextOffscreen(sim, device_id=-1))
frame = sim.render(16, 16, camera_name="front")
print(json.dumps({"opened": OPENED, "frame": list(frame.shape), "lit": int(frame.max())}))
