"""A checkpoint folder, its sealed manifest, and verification of every file against it.

Every checkpoint folder holds `evalfleet-checkpoint.json`: the backend that serves it, the backend's
settings, and the expected sha256 of every file the backend reads. Verification hashes each file
before anything is loaded and names the first one that differs, so a truncated download or a
swapped shard is refused instead of silently evaluated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_NAME = "evalfleet-checkpoint.json"
MANIFEST_FORMAT = "evalfleet-checkpoint/1"
INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "training_config.yaml"
NORMALIZATION_NAME = "normalization.json"
_CHUNK = 1 << 20


class CheckpointError(Exception):
    """The checkpoint folder is missing, malformed, or a file differs from its sealed hash."""

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint folder: every file named in `sha256` hashed as sealed."""

    name: str
    root: Path
    backend: str
    settings: dict[str, Any]
    sha256: dict[str, str]

    @property
    def shards(self) -> dict[str, str]:
        """Weight shards named by the safetensors index, with their hashes (none without an index)."""
        if INDEX_NAME not in self.sha256:
            return {}
        weight_map = json.loads((self.root / INDEX_NAME).read_text())["weight_map"]
        return {name: self.sha256[name] for name in sorted(set(weight_map.values()))}

    @property
    def others(self) -> dict[str, str]:
        """Sealed files that are neither shards nor index, config or normalization (a tokenizer)."""
        known = {*self.shards, INDEX_NAME, CONFIG_NAME, NORMALIZATION_NAME}
        return {name: digest for name, digest in sorted(self.sha256.items()) if name not in known}

    def file_hash(self, name: str) -> str:
        """The hash of an optional role file (index, config, normalization); empty when absent."""
        return self.sha256.get(name, "")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def seal(root: Path, backend: str, settings: dict[str, Any]) -> Path:
    """Writes the manifest of a checkpoint folder, hashing every other file in it."""
    files = {
        path.relative_to(root).as_posix(): sha256_file(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME
    }
    manifest = {"format": MANIFEST_FORMAT, "backend": backend, "settings": settings, "sha256": files}
    target = root / MANIFEST_NAME
    target.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return target


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise CheckpointError(f"{root} has no {MANIFEST_NAME}", path=path)
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not JSON: {exc}", path=path) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise CheckpointError(f"{path}: format must be {MANIFEST_FORMAT!r}", path=path)
    for key, kind in (("backend", str), ("settings", dict), ("sha256", dict)):
        if not isinstance(manifest.get(key), kind):
            raise CheckpointError(f"{path}: {key!r} must be a {kind.__name__}", path=path)
    return manifest


def _check_index_covered(root: Path, sealed: dict[str, str]) -> None:
    """Every shard the index names must be sealed, or an unsealed shard could be loaded."""
    if INDEX_NAME not in sealed:
        return
    weight_map = json.loads((root / INDEX_NAME).read_text()).get("weight_map", {})
    for shard in sorted(set(weight_map.values())):
        if shard not in sealed:
            raise CheckpointError(f"shard {shard} is named by {INDEX_NAME} but has no sealed hash", path=root / shard)


def load(root: Path, name: str | None = None) -> Checkpoint:
    """Reads the manifest and verifies every sealed file; raises CheckpointError naming the culprit."""
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint folder {root} does not exist", path=root)
    manifest = _read_manifest(root)
    sealed: dict[str, str] = manifest["sha256"]
    for relative, expected in sorted(sealed.items()):
        path = root / relative
        if not path.is_file():
            raise CheckpointError(f"{relative} is missing from {root}", path=path)
        actual = sha256_file(path)
        if actual != expected:
            raise CheckpointError(
                f"{relative} differs from its sealed hash: expected sha256 {expected}, got {actual}", path=path
            )
    _check_index_covered(root, sealed)
    return Checkpoint(
        name=name or root.name,
        root=root,
        backend=manifest["backend"],
        settings=manifest["settings"],
        sha256=dict(sealed),
    )
