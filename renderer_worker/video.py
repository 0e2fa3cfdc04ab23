"""The episode video: the frames a policy was shown, encoded to MP4 (H.264) as they come.

Researchers debug a policy by watching its failures, so the worker records what the policy saw:
its cameras side by side in one frame, with the step counter in a strip under them, and the
outcome (a green or red border, SUCCESS or FAILURE) on the last second, since it is known only at
the end. Each frame goes to PyAV's encoder the moment it is fed and its packets to the file, so an
episode of any length holds only the encoder's few frames of lookahead in memory. PyAV runs FFmpeg
in this process from its own wheel: no ffmpeg binary, no pipe to a subprocess.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.base import ArtifactFile, Image

log = logging.getLogger(__name__)

KIND = "video"
MEDIA_TYPE = "video/mp4"
# Frames per second of the file: one frame per observation shown (or per physics step with
# --video-every-step); the rate only sets how fast a viewer plays them.
FPS = 10
# The outcome is shown on the last frame, held this many frames (one second).
OUTCOME_FRAMES = FPS
CAPTION_HEIGHT = 16
BORDER = 3
_SUCCESS_RGB = (0, 200, 0)
_FAILURE_RGB = (220, 0, 0)


class VideoMode(str, enum.Enum):
    """Which episodes keep their video (``renderer-worker --video``)."""

    NONE = "none"
    FAILURES = "failures"
    ALL = "all"


class VideoError(Exception):
    """The encoder cannot be set up (PyAV missing) or a frame cannot be encoded."""


def check_available() -> None:
    """Raises VideoError unless PyAV and Pillow can be imported (the worker checks this at start)."""
    try:
        import av  # noqa: F401
        import PIL.ImageDraw  # noqa: F401
    except ImportError as exc:
        raise VideoError(
            f"--video needs PyAV and Pillow ({exc}); install evalfleet[worker] or pass --video none"
        ) from None


class VideoRecorder:
    """Encodes one episode's frames to ``path`` as they are fed; ``finish`` keeps or deletes the file.

    Nothing is written until the first frame; an episode that shows no camera has no video. A video
    that cannot be written (a full disk, an encoder error) is logged and dropped: it never fails
    the episode.
    """

    def __init__(self, path: str, mode: VideoMode, cameras: tuple[str, ...]) -> None:
        self.path = path
        self.mode = mode
        self.cameras = cameras
        self.frames = 0
        self._container: Any = None
        self._stream: Any = None
        self._last: npt.NDArray[np.uint8] | None = None
        self._last_step = 0
        self._opened = False

    @property
    def enabled(self) -> bool:
        return self.mode is not VideoMode.NONE and bool(self.path) and bool(self.cameras)

    def add(self, images: Mapping[str, Image], step: int) -> None:
        """Encodes one frame: ``images`` (the policy's cameras) side by side, ``step`` written under them."""
        if not self.enabled:
            return
        try:
            frame = _compose([images[name] for name in self.cameras])
            self._last, self._last_step = frame, step
            self._encode(_captioned(frame, f"step {step}", None))
        except Exception as exc:
            self._drop(exc)

    def finish(self, success: bool) -> ArtifactFile | None:
        """Burns the outcome into the last second and closes the file; returns it when this mode
        keeps it (``all``, or ``failures`` and the episode failed), deleting it otherwise."""
        if self._container is None or self._last is None:
            return None
        outcome = "SUCCESS" if success else "FAILURE"
        try:
            last = _captioned(
                self._last, f"step {self._last_step}  {outcome}", _SUCCESS_RGB if success else _FAILURE_RGB
            )
            for _ in range(OUTCOME_FRAMES):
                self._encode(last)
            self._close()
        except Exception as exc:
            self._drop(exc)
            return None
        self._opened = False  # abandon() leaves it alone from here
        if self.mode is VideoMode.ALL or (self.mode is VideoMode.FAILURES and not success):
            return ArtifactFile(self.path, KIND, MEDIA_TYPE)
        os.unlink(self.path)
        return None

    def abandon(self) -> None:
        """Closes and deletes the file (the episode ended without a result to attach it to)."""
        if self._container is not None:
            try:
                self._close()
            except Exception:  # an encoder in a bad state: the file goes anyway
                pass
        if self._opened:
            Path(self.path).unlink(missing_ok=True)

    def _drop(self, exc: Exception) -> None:
        log.warning("episode video %s dropped: %s: %s", self.path, type(exc).__name__, exc)
        self.abandon()
        self.mode = VideoMode.NONE

    def _encode(self, frame: npt.NDArray[np.uint8]) -> None:
        import av

        if self._container is None:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._opened = True
            self._container = av.open(self.path, mode="w", options={"movflags": "+faststart"})
            stream = self._container.add_stream("libx264", rate=FPS)
            stream.width, stream.height = frame.shape[1], frame.shape[0]
            stream.pix_fmt = "yuv420p"  # what every browser plays
            stream.options = {"preset": "veryfast", "crf": "23"}
            self._stream = stream
        packets = self._stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24"))
        self._container.mux(packets)
        self.frames += 1

    def _close(self) -> None:
        container, self._container = self._container, None
        try:
            container.mux(self._stream.encode(None))  # flush the encoder's lookahead
        finally:
            container.close()


def _compose(images: list[Image]) -> npt.NDArray[np.uint8]:
    """The cameras side by side (RGB, a grey camera repeated to three channels), on a black canvas
    of the tallest one's height plus the caption strip, padded to even sizes (yuv420p needs them)."""
    rgb = [np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image[..., :3] for image in images]
    height = max(image.shape[0] for image in rgb)
    width = sum(image.shape[1] for image in rgb)
    canvas = np.zeros((_even(height + CAPTION_HEIGHT), _even(width), 3), dtype=np.uint8)
    x = 0
    for image in rgb:
        canvas[: image.shape[0], x : x + image.shape[1]] = image
        x += image.shape[1]
    return canvas


def _captioned(frame: npt.NDArray[np.uint8], text: str, border: tuple[int, int, int] | None) -> npt.NDArray[np.uint8]:
    """A copy of ``frame`` with ``text`` in its bottom strip and, when given, a border of that colour."""
    from PIL import Image as PILImage
    from PIL import ImageDraw

    picture = PILImage.fromarray(frame)
    draw = ImageDraw.Draw(picture)
    height, width = frame.shape[:2]
    draw.rectangle((0, height - CAPTION_HEIGHT, width, height), fill=border or (0, 0, 0))
    draw.text((2, height - CAPTION_HEIGHT + 2), text, fill=(255, 255, 255))
    if border is not None:
        draw.rectangle((0, 0, width - 1, height - 1), outline=border, width=BORDER)
    return np.asarray(picture, dtype=np.uint8)


def _even(n: int) -> int:
    return n + n % 2
