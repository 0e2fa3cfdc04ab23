"""`scheduler backup`: an online copy of the database of a scheduler under write load.

A scheduler started on the copy serves a state in which every result belongs to a task whose state
agrees; a backup that cannot be made is one line, exit 2, and leaves no file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from procs import cli, one_line_refusal, wait_until

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from scheduler.store.schema import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(240)

FIXTURES = Path(__file__).parent / "fixtures"
V3_FIXTURE = FIXTURES / "scheduler-v3.sqlite"
# More episodes than the load gets through while the backups run, however slowly their processes
# start on a busy machine: the copy must be taken while results are still coming in.
LOAD_EPISODES = 20000


def _load(address: str, name: str, stop: threading.Event, reported: list[int], errors: list[BaseException]) -> None:
    """A worker's calls as fast as they go: claim, one report per episode, complete."""
    try:
        with SchedulerClient(address) as client:
            while not stop.is_set() and (lease := client.claim(name, ["synthetic"])) is not None:
                for index in lease.episodes:
                    client.report_episode(lease, index, True, steps=index + 1, trace_digest=f"t{index}")
                    reported.append(1)
                client.complete(lease)
    except BaseException as exc:
        errors.append(exc)


def test_a_backup_under_write_load_is_a_consistent_state_a_scheduler_serves(start_scheduler, tmp_path):
    live = start_scheduler("--lease-seconds", "60")
    client = live.client()
    client.submit([build_synthetic(LOAD_EPISODES, seed=21)], "synthetic", batch_size=2, submission_id="load")
    stop = threading.Event()
    reported: list[int] = []
    errors: list[BaseException] = []
    workers = [threading.Thread(target=_load, args=(live.address, f"w{i}", stop, reported, errors)) for i in range(4)]
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: len(reported) >= 40 or errors, 60, "the load running")
        copy = tmp_path / "backup.sqlite"
        first = cli("backup", "--db", str(live.db), "--out", str(copy))
        assert first.returncode == 0, first.stderr
        first_copy = copy.read_bytes()
        refused = one_line_refusal(cli("backup", "--db", str(live.db), "--out", str(copy)))
        assert refused == f"scheduler: --out {copy} exists; pass --force to replace it\n"
        assert copy.read_bytes() == first_copy, "the refusal left the first copy as it was"
        forced = cli("backup", "--db", str(live.db), "--out", str(copy), "--force", "--json")
        assert forced.returncode == 0, forced.stderr
        after_backup = len(reported)
        wait_until(lambda: len(reported) >= after_backup + 40 or errors, 60, "the load going on after the backup")
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)
    assert not errors, errors

    assert f"integrity ok, schema version {SCHEMA_VERSION}" in first.stdout
    assert "rows: " in first.stdout and " attempts " in first.stdout and "episode_results " in first.stdout
    document = json.loads(forced.stdout)
    assert document["integrity"] == "ok" and document["schema_version"] == SCHEMA_VERSION
    copied_results = document["rows"]["episode_results"]
    with sqlite3.connect(f"file:{live.db}?mode=ro", uri=True) as conn:
        live_results = conn.execute("SELECT count(*) FROM episode_results").fetchone()[0]
    assert 0 < copied_results < live_results, "the copy is a state taken while the load ran"

    # Every result in the copy belongs to a task whose state agrees with it.
    with sqlite3.connect(copy) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        disagreeing = conn.execute(
            "SELECT r.task_id, r.episode_index, t.state FROM episode_results r LEFT JOIN tasks t ON t.id = r.task_id"
            " WHERE t.id IS NULL OR t.state NOT IN ('leased', 'succeeded') OR r.fencing_token != t.fencing_token"
            " OR r.episode_index NOT BETWEEN t.episode_start AND t.episode_end - 1"
        ).fetchall()
        assert disagreeing == []
        incomplete = conn.execute(
            "SELECT t.id FROM tasks t WHERE t.state = 'succeeded' AND (t.episode_end - t.episode_start) !="
            " (SELECT count(*) FROM episode_results r WHERE r.task_id = t.id)"
        ).fetchall()
        assert incomplete == []
        unended = conn.execute(
            "SELECT t.id FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.fencing_token = t.fencing_token"
            " WHERE (t.state = 'succeeded') != (a.outcome = 'succeeded')"
        ).fetchall()
        assert unended == []
        succeeded = conn.execute("SELECT count(*) FROM tasks WHERE state = 'succeeded'").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM episode_results").fetchone()[0] == copied_results
    conn.close()

    restored = start_scheduler("--lease-seconds", "60", db=copy)
    served = restored.client()
    (manifest,) = served.summary("load").manifests
    assert manifest.episodes_completed == copied_results
    assert served.status("load").tasks.succeeded == succeeded
    assert served.status("load").tasks.total == LOAD_EPISODES // 2
    lease = served.claim("w9", ["synthetic"])
    assert lease is not None
    for index in lease.episodes:
        served.report_episode(lease, index, True, steps=1)
    served.complete(lease)
    assert served.status("load").tasks.succeeded == succeeded + 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--db", "{tmp}/missing.sqlite", "--out", "{tmp}/copy.sqlite"),
            "--db {tmp}/missing.sqlite: no such database file",
        ),
        (("--db", "{tmp}/live.sqlite", "--out", "{tmp}/no/such/copy.sqlite"), "no such folder {tmp}/no/such"),
        (("--db", "{tmp}/live.sqlite", "--out", "{tmp}/live.sqlite", "--force"), "is the database itself"),
        (("--db", "{tmp}/live.sqlite", "--out", "{tmp}", "--force"), "--out {tmp} is a folder; name the file"),
        (("--db", "{tmp}/people.sqlite", "--out", "{tmp}/copy.sqlite"), "not a scheduler database"),
    ],
)
def test_a_backup_that_cannot_be_made_is_one_line_and_leaves_no_file(tmp_path, args, message):
    live = tmp_path / "live.sqlite"
    cli("backup", "--db", str(V3_FIXTURE), "--out", str(live))
    with sqlite3.connect(tmp_path / "people.sqlite") as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    before = sorted(p.name for p in tmp_path.iterdir())
    stderr = one_line_refusal(cli("backup", *(arg.format(tmp=tmp_path) for arg in args)))
    assert message.format(tmp=tmp_path) in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
