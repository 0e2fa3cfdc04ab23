"""A small filesystem of its own for a test to fill: tmpfs, or else a loop-mounted ext4 image.

Filling the machine's own disk would hurt everything else on it, so a disk-full test gets a volume
of a few MiB, mounted under its temporary folder and unmounted after. Mounting needs root
(CAP_SYS_ADMIN); CI runs as root with ``EVALFLEET_REQUIRE_NETNS=1``, where a test that cannot mount
fails with the reason instead of skipping (``require_small_disk``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest


class MountError(RuntimeError):
    """Neither a tmpfs nor a loop-mounted image could be mounted; carries what each said."""


def _run(*argv: str) -> str | None:
    """None when the command succeeded, else what it printed."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return None if result.returncode == 0 else f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}"


@contextlib.contextmanager
def small_disk(mountpoint: Path, size_mib: int) -> Iterator[Path]:
    """A filesystem of ``size_mib`` MiB mounted at ``mountpoint`` for the block; ``MountError`` if none can be."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    image = mountpoint.with_name(f"{mountpoint.name}.img")
    tmpfs = _run("mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mountpoint))
    if tmpfs is not None:
        with image.open("wb") as handle:
            handle.truncate(size_mib * 1024 * 1024)
        loop = _run("mkfs.ext4", "-q", "-F", str(image)) or _run("mount", "-o", "loop", str(image), str(mountpoint))
        if loop is not None:
            image.unlink()
            raise MountError(f"cannot mount a small filesystem: tmpfs: {tmpfs}; loop image: {loop}")
    try:
        yield mountpoint
    finally:
        # A process of the test may still hold a file open there: then detach lazily.
        if _run("umount", str(mountpoint)) is not None:
            _run("umount", "-l", str(mountpoint))
        image.unlink(missing_ok=True)


@contextlib.contextmanager
def require_small_disk(mountpoint: Path, size_mib: int) -> Iterator[Path]:
    """``small_disk``; where none can be mounted the test skips, or fails under
    ``EVALFLEET_REQUIRE_NETNS`` (CI runs as root and sets it, so there it must run)."""
    if os.geteuid() != 0:
        _skip_or_fail("mounting a small filesystem needs root (CI runs as root)")
    with contextlib.ExitStack() as stack:
        try:
            mounted = stack.enter_context(small_disk(mountpoint, size_mib))
        except MountError as exc:
            _skip_or_fail(str(exc))
        yield mounted


def _skip_or_fail(reason: str) -> NoReturn:
    if os.environ.get("EVALFLEET_REQUIRE_NETNS"):
        pytest.fail(f"EVALFLEET_REQUIRE_NETNS is set but {reason}")
    pytest.skip(reason)


def fill(folder: Path, name: str = "ballast") -> Path:
    """Writes a file in ``folder`` until its filesystem has no room left; returns the file."""
    ballast = folder / name
    chunk = b"\0" * 65536
    with ballast.open("wb", buffering=0) as handle:
        while True:
            try:
                handle.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        # The last pages: smaller writes until not one byte more fits.
        for size in (4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    handle.write(b"\0" * size)
    return ballast
