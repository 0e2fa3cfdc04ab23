"""A RoboTwin root is accepted only at commit c3ddfa8, read from git metadata or ROBOTWIN_COMMIT."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.base import BenchmarkError
from benchmarks.robotwin.root import EXPECTED_COMMIT, RootError, checkout_commit, open_root

pytestmark = pytest.mark.timeout(30)

DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "robotwin_root"
OTHER_COMMIT = "cf47ab5" + "0" * 33


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A copy of the RoboTwin double without its ROBOTWIN_COMMIT file, so each test says how it is known."""
    copy = tmp_path / "RoboTwin"
    shutil.copytree(DOUBLE, copy)
    (copy / "ROBOTWIN_COMMIT").unlink()
    return copy


def _git(root: Path, head: str) -> Path:
    git = root / ".git"
    git.mkdir()
    (git / "HEAD").write_text(head + "\n")
    return git


def test_the_double_is_accepted_through_its_commit_file() -> None:
    opened = open_root(DOUBLE)
    assert opened.commit == EXPECTED_COMMIT
    assert opened.path == DOUBLE


def test_a_detached_git_checkout_at_the_commit_is_accepted(root: Path) -> None:
    _git(root, EXPECTED_COMMIT)
    assert open_root(root).commit == EXPECTED_COMMIT


def test_a_branch_checkout_resolves_loose_and_packed_refs(root: Path) -> None:
    git = _git(root, "ref: refs/heads/main")
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{EXPECTED_COMMIT} refs/heads/main\n")
    assert checkout_commit(root) == EXPECTED_COMMIT
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "refs" / "heads" / "main").write_text(OTHER_COMMIT + "\n")
    assert checkout_commit(root) == OTHER_COMMIT


def test_a_submodule_worktree_is_followed_to_its_common_dir(root: Path, tmp_path: Path) -> None:
    common = tmp_path / "super" / ".git"
    worktree = common / "worktrees" / "robotwin"
    worktree.mkdir(parents=True)
    (worktree / "HEAD").write_text("ref: refs/heads/eval\n")
    (worktree / "commondir").write_text("../..\n")
    (common / "refs" / "heads").mkdir(parents=True)
    (common / "refs" / "heads" / "eval").write_text(EXPECTED_COMMIT + "\n")
    (root / ".git").write_text(f"gitdir: {worktree}\n")
    assert open_root(root).commit == EXPECTED_COMMIT


def test_a_root_at_another_commit_is_refused(root: Path) -> None:
    _git(root, OTHER_COMMIT)
    with pytest.raises(RootError, match=f"is at commit {OTHER_COMMIT}.*targets {EXPECTED_COMMIT}") as caught:
        open_root(root)
    assert caught.value.field == "robotwin_root"


def test_git_and_commit_file_must_agree(root: Path) -> None:
    _git(root, OTHER_COMMIT)
    (root / "ROBOTWIN_COMMIT").write_text(EXPECTED_COMMIT + "\n")
    with pytest.raises(RootError, match="ROBOTWIN_COMMIT says"):
        open_root(root)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda r: None, "cannot tell its commit"),
        (lambda r: (r / "ROBOTWIN_COMMIT").write_text("c3ddfa8\n"), "full 40-hex commit id"),
        (lambda r: _git(r, "garbage"), "unreadable .git HEAD"),
        (lambda r: _git(r, "ref: refs/heads/gone"), "resolves to no commit"),
        (lambda r: (r / ".git").write_text("not a pointer\n"), "does not name a gitdir"),
        (lambda r: (r / ".git").write_text("gitdir: ../nowhere\n"), "cannot read"),
    ],
)
def test_unknowable_commits_are_refused(root: Path, setup, message: str) -> None:
    setup(root)
    with pytest.raises(RootError, match=message):
        open_root(root)


def test_a_missing_root_or_a_tree_that_is_not_robotwin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BenchmarkError, match="is not a directory"):
        open_root(tmp_path / "third_party" / "RoboTwin")
    (tmp_path / "ROBOTWIN_COMMIT").write_text(EXPECTED_COMMIT)
    with pytest.raises(RootError, match="missing envs/_base_task.py"):
        open_root(tmp_path)
