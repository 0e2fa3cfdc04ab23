"""Which RoboTwin checkout a root is, decided before anything runs.

The adapter reproduces RoboTwin's classic evaluation layout at one commit; instruction templates
and task code changed after it, so a root at any other commit would silently evaluate a different
benchmark. The commit comes from the root's git metadata (a plain clone, a submodule or a worktree,
read without a git binary) or, for trees shipped without ``.git``, from a ``ROBOTWIN_COMMIT`` file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from benchmarks.base import BenchmarkError

EXPECTED_COMMIT = "c3ddfa8b97d5519efa828b075999bd0006778e5e"
COMMIT_FILE = "ROBOTWIN_COMMIT"
LAYOUT = (
    "envs/_base_task.py",
    "task_config/_eval_step_limit.yml",
    "description/utils/generate_episode_instructions.py",
)
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


class RootError(BenchmarkError):
    """A RoboTwin root is missing, incomplete, or not at the expected commit."""

    def __init__(self, root: Path, message: str) -> None:
        super().__init__(f"{root}: {message}", field="robotwin_root")
        self.root = root


@dataclass(frozen=True)
class RoboTwinRoot:
    """A verified RoboTwin checkout: its absolute path and the commit it is at."""

    path: Path
    commit: str


def open_root(path: str | Path) -> RoboTwinRoot:
    """Verifies that ``path`` is a RoboTwin checkout at EXPECTED_COMMIT; refuses anything else."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise RootError(root, "is not a directory")
    missing = [name for name in LAYOUT if not (root / name).is_file()]
    if missing:
        raise RootError(root, f"is not a RoboTwin checkout (missing {', '.join(missing)})")
    commit = checkout_commit(root)
    if commit != EXPECTED_COMMIT:
        raise RootError(root, f"is at commit {commit}; evalfleet's RoboTwin adapter targets {EXPECTED_COMMIT}")
    return RoboTwinRoot(path=root, commit=commit)


def checkout_commit(root: Path) -> str:
    """The commit of a checkout; git metadata and a ROBOTWIN_COMMIT file must agree when both exist."""
    from_git = _git_head(root) if (root / ".git").exists() else None
    commit_file = root / COMMIT_FILE
    from_file = _commit_file(root, commit_file) if commit_file.is_file() else None
    if from_git and from_file and from_git != from_file:
        raise RootError(root, f".git HEAD is {from_git} but {COMMIT_FILE} says {from_file}")
    commit = from_git or from_file
    if commit is None:
        raise RootError(root, f"cannot tell its commit: no .git and no {COMMIT_FILE} file")
    return commit


def _commit_file(root: Path, path: Path) -> str:
    text = path.read_text(encoding="utf-8").strip()
    if not _SHA_RE.match(text):
        raise RootError(root, f"{COMMIT_FILE} must hold a full 40-hex commit id, got {text[:80]!r}")
    return text


def _git_head(root: Path) -> str:
    git_dir = _git_dir(root)
    head = _read(root, git_dir / "HEAD")
    if _SHA_RE.match(head):
        return head
    if not head.startswith("ref: "):
        raise RootError(root, f"unreadable .git HEAD {head[:80]!r}")
    return _resolve_ref(root, git_dir, head.removeprefix("ref: ").strip())


def _git_dir(root: Path) -> Path:
    """``.git`` is a directory in a clone and a ``gitdir:`` pointer file in submodules and worktrees."""
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    pointer = _read(root, dot_git)
    if not pointer.startswith("gitdir: "):
        raise RootError(root, f".git file does not name a gitdir: {pointer[:80]!r}")
    return (root / pointer.removeprefix("gitdir: ").strip()).resolve()


def _resolve_ref(root: Path, git_dir: Path, ref: str) -> str:
    """Looks a branch up loose, then packed; a worktree keeps shared refs in its ``commondir``."""
    dirs = [git_dir]
    if (git_dir / "commondir").is_file():
        dirs.append((git_dir / _read(root, git_dir / "commondir")).resolve())
    for directory in dirs:
        loose = directory / ref
        if loose.is_file() and _SHA_RE.match(_read(root, loose)):
            return _read(root, loose)
        packed = directory / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and _SHA_RE.match(sha):
                    return sha
    raise RootError(root, f".git HEAD points at {ref}, which resolves to no commit")


def _read(root: Path, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RootError(root, f"cannot read {path}: {exc.strerror}") from exc
