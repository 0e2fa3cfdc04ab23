"""Which EGL device is which GPU: MuJoCo renders on an EGL device index, and only EGL knows its order.

``MUJOCO_EGL_DEVICE_ID``, read by MuJoCo's own ``mujoco.egl`` and by robosuite's EGL context, is a
position in the list ``eglQueryDevicesEXT`` returns. Nothing promises that list is in NVML's or
CUDA's order, so a worker given a GPU by UUID asks EGL which device is that GPU, both ways the
NVIDIA driver can tell: the device's UUID (``EGL_EXT_device_persistent_id``), and the CUDA device
the EGL device is (``EGL_NV_device_cuda``), whose UUID the CUDA driver tells. A device matches when
either names the GPU; two devices matching one GPU is an error, never a guess.

The query runs in a child process (``python -m renderer_worker.egl``) under the render environment
the episode processes get, so it sees their device list (same driver, same CUDA-visible devices),
and the worker process itself never loads libEGL or libcuda. PyOpenGL is imported only there.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

# EGL enums (Khronos eglext.h); PyOpenGL binds neither EGL_EXT_device_persistent_id nor, usably
# before a display exists, the device-query functions, so they are called through eglGetProcAddress.
EGL_EXTENSIONS = 0x3055
EGL_CUDA_DEVICE_NV = 0x323A
EGL_DEVICE_UUID_EXT = 0x335C
MAX_DEVICES = 64
QUERY_TIMEOUT_S = 60.0


class EglQueryError(RuntimeError):
    """EGL's devices could not be listed here (no libEGL, no device enumeration, a driver error)."""


@dataclass(frozen=True)
class EglDevice:
    """One entry of ``eglQueryDevicesEXT``'s list and the GPU it is, as far as the driver says.

    UUIDs are written as NVML writes them (GPU-xxxxxxxx-…); "" where the driver does not say (Mesa's
    software device says neither).
    """

    index: int  # what MUJOCO_EGL_DEVICE_ID means: the position in eglQueryDevicesEXT's list
    extensions: str  # the device's own extension string
    persistent_uuid: str = ""  # EGL_EXT_device_persistent_id's EGL_DEVICE_UUID_EXT
    cuda_uuid: str = ""  # the UUID of the CUDA device EGL_NV_device_cuda names

    def is_gpu(self, uuid: str) -> bool:
        return uuid.lower() in {self.persistent_uuid.lower(), self.cuda_uuid.lower()} - {""}

    def describe(self) -> str:
        said = [
            f"{name} {value}" for name, value in (("UUID", self.persistent_uuid), ("CUDA", self.cuda_uuid)) if value
        ]
        return f"{self.index}: {', '.join(said) or 'no GPU UUID'} ({self.extensions or 'no extensions'})"


def format_gpu_uuid(raw: bytes) -> str:
    """16 UUID bytes as NVML and nvidia-smi write them: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    if len(raw) != 16:
        raise ValueError(f"a GPU UUID has 16 bytes, got {len(raw)}")
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def devices_in_child(environment: Mapping[str, str], timeout: float = QUERY_TIMEOUT_S) -> list[EglDevice]:
    """EGL's devices as a process started with ``environment`` over this one's sees them."""
    run = subprocess.run(
        [sys.executable, "-m", "renderer_worker.egl"],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines() or [f"exit code {run.returncode}"]
        raise EglQueryError(lines[-1])
    try:
        return [EglDevice(**entry) for entry in json.loads(run.stdout)]
    except (ValueError, TypeError) as exc:
        raise EglQueryError(f"unreadable EGL device list {run.stdout[:200]!r}: {exc}") from None


def query_devices() -> list[EglDevice]:
    """EGL's devices in this process, in ``eglQueryDevicesEXT``'s order. Needs PYOPENGL_PLATFORM=egl."""
    if os.environ.get("PYOPENGL_PLATFORM", "").lower() != "egl":
        raise EglQueryError("PYOPENGL_PLATFORM must be 'egl' to list EGL devices")
    try:
        from OpenGL import EGL
    except (ImportError, AttributeError) as exc:  # no PyOpenGL, or no libEGL behind it
        raise EglQueryError(f"cannot load EGL through PyOpenGL: {exc}") from None

    def proc(name: str, prototype: Any) -> Any:
        address = EGL.eglGetProcAddress(name)
        return prototype(address) if address else None

    device_p = EGL.EGLDeviceEXT
    query_devices_ext = proc(
        "eglQueryDevicesEXT",
        ctypes.CFUNCTYPE(EGL.EGLBoolean, EGL.EGLint, ctypes.POINTER(device_p), ctypes.POINTER(EGL.EGLint)),
    )
    query_string = proc("eglQueryDeviceStringEXT", ctypes.CFUNCTYPE(ctypes.c_char_p, device_p, EGL.EGLint))
    if query_devices_ext is None or query_string is None:
        raise EglQueryError("this EGL has no device enumeration (EGL_EXT_device_enumeration, EGL_EXT_device_query)")
    query_attrib = proc(
        "eglQueryDeviceAttribEXT",
        ctypes.CFUNCTYPE(EGL.EGLBoolean, device_p, EGL.EGLint, ctypes.POINTER(ctypes.c_ssize_t)),
    )
    query_binary = proc(
        "eglQueryDeviceBinaryEXT",
        ctypes.CFUNCTYPE(EGL.EGLBoolean, device_p, EGL.EGLint, EGL.EGLint, ctypes.c_void_p, ctypes.POINTER(EGL.EGLint)),
    )
    handles = (device_p * MAX_DEVICES)()
    count = EGL.EGLint()
    if not query_devices_ext(MAX_DEVICES, handles, ctypes.byref(count)):
        raise EglQueryError(f"eglQueryDevicesEXT failed (EGL error 0x{EGL.eglGetError():x})")
    devices = []
    for index in range(count.value):
        extensions = (query_string(handles[index], EGL_EXTENSIONS) or b"").decode(errors="replace")
        names = extensions.split()
        devices.append(
            EglDevice(
                index=index,
                extensions=extensions,
                persistent_uuid=_persistent_uuid(handles[index], names, query_binary),
                cuda_uuid=_cuda_uuid(handles[index], names, query_attrib),
            )
        )
    return devices


def _persistent_uuid(handle: Any, extensions: list[str], query_binary: Any) -> str:
    """EGL_DEVICE_UUID_EXT of the device, "" where it has no EGL_EXT_device_persistent_id."""
    if "EGL_EXT_device_persistent_id" not in extensions or query_binary is None:
        return ""
    raw = (ctypes.c_ubyte * 16)()
    size = ctypes.c_int32()
    if query_binary(handle, EGL_DEVICE_UUID_EXT, 16, raw, ctypes.byref(size)) and size.value == 16:
        return format_gpu_uuid(bytes(raw))
    return ""


def _cuda_uuid(handle: Any, extensions: list[str], query_attrib: Any) -> str:
    """UUID of the CUDA device the EGL device is (EGL_NV_device_cuda), "" where it does not say."""
    if "EGL_NV_device_cuda" not in extensions or query_attrib is None:
        return ""
    ordinal = ctypes.c_ssize_t(-1)
    if query_attrib(handle, EGL_CUDA_DEVICE_NV, ctypes.byref(ordinal)) and ordinal.value >= 0:
        return _cuda_device_uuid(ordinal.value)
    return ""


def _cuda_device_uuid(ordinal: int) -> str:
    """UUID of CUDA device ``ordinal`` in this process's numbering (CUDA driver API), "" if unknown."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ""
    device = ctypes.c_int()
    raw = (ctypes.c_ubyte * 16)()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return ""
    if cuda.cuDeviceGetUuid(raw, device) != 0:
        return ""
    return format_gpu_uuid(bytes(raw))


def main() -> int:
    """Prints this process's EGL devices as JSON; a one-line error on stderr and exit 1 otherwise."""
    try:
        devices = query_devices()
    except EglQueryError as exc:
        print(f"renderer_worker.egl: {exc}", file=sys.stderr)
        return 1
    print(json.dumps([asdict(device) for device in devices]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
