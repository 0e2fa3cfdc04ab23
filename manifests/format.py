"""The manifest format: canonical JSON, content address, validation.

A manifest fixes the ordered population of episodes of one benchmark task + setting. It is sealed:
its name is the sha256 of its canonical bytes, so two parties holding the same hash hold the same
episodes, and any edit produces a different manifest rather than a silently different evaluation.

Canonical JSON is UTF-8, keys sorted, no insignificant whitespace, no NaN or infinities. Python's
float repr is the shortest round-tripping form, so encode(decode(b)) == b for canonical b.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "evalfleet.manifest/v1"
MAX_EPISODES = 1_000_000
_HASH_RE = re.compile(r"^[0-9a-f]{64}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+-]{0,199}$")


class ManifestError(ValueError):
    """A manifest is malformed, not canonical, or not the one expected.

    `field` names the offending part (a JSON path such as ``episodes[3].episode_id``) so that
    services can answer with a message that points at it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def canonical_bytes(obj: Any) -> bytes:
    """Encodes a JSON-compatible object canonically (the bytes a manifest hash is taken over)."""
    try:
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, RecursionError) as exc:
        raise ManifestError("manifest", f"not encodable as canonical JSON ({exc})") from exc
    return text.encode("utf-8")


def content_hash(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def is_hash(text: str) -> bool:
    return bool(_HASH_RE.match(text))


@dataclass(frozen=True)
class Manifest:
    """A validated manifest and the exact bytes it was read from.

    ``verified`` is True only on what ``parse`` returned: its bytes hashed to ``hash`` and ``data``
    is their parse. A Manifest built any other way (it is a plain dataclass: anyone can construct
    one, or ``dataclasses.replace`` a field) is not, and ``verify`` parses it again from its bytes.
    """

    body: bytes
    hash: str
    data: Mapping[str, Any]  # as parse() validated it: the properties below read typed fields of it
    verified: bool = field(default=False, init=False, compare=False, repr=False)

    @property
    def benchmark(self) -> str:
        benchmark: str = self.data["benchmark"]
        return benchmark

    @property
    def task(self) -> str:
        task: str = self.data["task"]
        return task

    @property
    def setting(self) -> str:
        setting: str = self.data["setting"]
        return setting

    @property
    def episodes(self) -> list[dict[str, Any]]:
        episodes: list[dict[str, Any]] = self.data["episodes"]
        return episodes

    def __len__(self) -> int:
        return len(self.data["episodes"])


def build(
    *,
    benchmark: str,
    task: str,
    setting: str,
    episodes: list[dict[str, Any]],
    protocol: Mapping[str, Any] | None = None,
    versions: Mapping[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
) -> Manifest:
    """Seals a manifest from its parts; validation runs exactly as for one read from disk."""
    data = {
        "format": FORMAT,
        "benchmark": benchmark,
        "task": task,
        "setting": setting,
        "protocol": dict(protocol or {}),
        "versions": dict(versions or {}),
        "source": dict(source or {}),
        "episodes": episodes,
    }
    return parse(canonical_bytes(data))


def parse(body: bytes, expected_hash: str | None = None) -> Manifest:
    """Parses and validates manifest bytes; refuses anything not canonical or not as expected."""
    digest = content_hash(body)
    if expected_hash is not None and digest != expected_hash:
        raise ManifestError("hash", f"content hashes to {digest}, expected {expected_hash}")
    try:
        data = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad UTF-8, bad JSON and integers past Python's digit limit;
        # RecursionError, arrays or objects nested deeper than the decoder's stack.
        raise ManifestError("manifest", f"not valid UTF-8 JSON ({type(exc).__name__}: {exc})") from exc
    _validate(data)
    if canonical_bytes(data) != body:
        raise ManifestError("manifest", "not in canonical form (sorted keys, compact separators, UTF-8)")
    manifest = Manifest(body=body, hash=digest, data=data)
    object.__setattr__(manifest, "verified", True)  # frozen: only parse() vouches for what it hashed
    return manifest


def verify(manifest: Manifest) -> Manifest:
    """``manifest`` itself when ``parse`` built it, else the manifest its bytes are, checked against
    its hash: only data that hashes to a manifest's name may decide what runs. A process that keeps
    what ``parse`` returned (an episode process, between episodes) hashes each manifest once."""
    if manifest.verified:
        return manifest
    return parse(manifest.body, expected_hash=manifest.hash)


def _validate(data: Any) -> None:
    if not isinstance(data, dict):
        raise ManifestError("manifest", "must be a JSON object")
    if data.get("format") != FORMAT:
        raise ManifestError("format", f"must be {FORMAT!r}, got {data.get('format')!r}")
    for key in ("benchmark", "task", "setting"):
        value = data.get(key)
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise ManifestError(key, f"must be a name matching {_NAME_RE.pattern}, got {value!r}")
    for key in ("protocol", "versions", "source"):
        if not isinstance(data.get(key), dict):
            raise ManifestError(key, "must be a JSON object")
    episodes = data.get("episodes")
    if not isinstance(episodes, list) or not episodes:
        raise ManifestError("episodes", "must be a non-empty list")
    if len(episodes) > MAX_EPISODES:
        raise ManifestError("episodes", f"has {len(episodes)} entries, at most {MAX_EPISODES}")
    seen: set[str] = set()
    for i, entry in enumerate(episodes):
        if not isinstance(entry, dict):
            raise ManifestError(f"episodes[{i}]", "must be a JSON object")
        episode_id = entry.get("episode_id")
        if not isinstance(episode_id, str) or not episode_id:
            raise ManifestError(f"episodes[{i}].episode_id", "must be a non-empty string")
        if episode_id in seen:
            raise ManifestError(f"episodes[{i}].episode_id", f"duplicate {episode_id!r}")
        seen.add(episode_id)
    extra = set(data) - {"format", "benchmark", "task", "setting", "protocol", "versions", "source", "episodes"}
    if extra:
        raise ManifestError(sorted(extra)[0], "unknown top-level field")


def read(path: str | Path, expected_hash: str | None = None) -> Manifest:
    """Reads and verifies a manifest file against ``expected_hash``, else the hash in its name."""
    path = Path(path)
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise ManifestError("path", f"cannot read {path}: {exc.strerror}") from exc
    stem = path.name.removesuffix(".json")
    return parse(body, expected_hash=expected_hash or (stem if is_hash(stem) else None))


def write(manifest: Manifest, out: str | Path) -> Path:
    """Writes a sealed manifest; into a directory it goes as ``<hash>.json``. Returns the path."""
    out = Path(out)
    path = out / f"{manifest.hash}.json" if out.is_dir() else out
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(manifest.body)
    tmp.replace(path)
    return path
