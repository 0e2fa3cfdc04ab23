"""Episode artifacts reach the scheduler over gRPC: fenced uploads, content-addressed storage beside
the database, limits, listing on the episode, download, and gc. Real scheduler processes, real
SQLite files, the real `scheduler` CLI; the worker side is in ``test_worker_artifacts.py``.
"""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from dashboard_proc import start_with_dashboard
from procs import cli, db_fingerprint, one_line_refusal
from small_disk import fill, require_small_disk

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.scheduler_api.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    ResourceExhausted,
    StaleLease,
)
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.artifacts import OWNER_FILE
from scheduler.store.schema import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(120)


def _store(db: Path) -> Path:
    return db.with_name(db.name + ".artifacts")


def _files(store: Path) -> list[Path]:
    """Every file under the store, temporary ones included (not its STORE_ID)."""
    return sorted(path for path in store.rglob("*") if path.is_file() and path.name != OWNER_FILE)


def _video(tmp_path: Path, name: str, size: int) -> Path:
    path = tmp_path / name
    path.write_bytes(os.urandom(size))
    return path


def _leased(client: SchedulerClient, submission_id: str, episodes: int = 2) -> pb.Lease:
    client.submit([build_synthetic(episodes, seed=7)], "synthetic", batch_size=episodes, submission_id=submission_id)
    lease = client.claim("w1", ["synthetic"])
    assert lease is not None
    return lease


def test_upload_list_and_get_round_trip_byte_identical(scheduler, tmp_path):
    client = scheduler.client()
    lease = _leased(client, "rt")
    video = _video(tmp_path, "ep0.mp4", 3 * 1024 * 1024 + 17)  # several chunks, the last one short
    uploaded = client.upload_artifact(lease, 0, video, "video", "video/mp4")
    digest = hashlib.sha256(video.read_bytes()).hexdigest()
    assert uploaded.created and uploaded.artifact.sha256 == digest
    assert uploaded.artifact.size_bytes == video.stat().st_size
    # A resent upload (the answer was lost) is a duplicate, not a second artifact.
    assert not client.upload_artifact(lease, 0, video, "video", "video/mp4").created
    stored = _store(scheduler.db) / digest[:2] / digest
    assert stored.read_bytes() == video.read_bytes()

    client.report_episode(lease, 0, True, steps=3)
    client.report_episode(lease, 1, False, steps=3)
    client.complete(lease)
    episodes = client.task(lease.task_id).episodes
    assert [(a.kind, a.sha256, a.media_type) for a in episodes[0].artifacts] == [("video", digest, "video/mp4")]
    assert list(episodes[1].artifacts) == []

    out = tmp_path / "got.mp4"
    got = cli("artifact", "get", digest, "--out", str(out), "--server", scheduler.address)
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == video.read_bytes()
    shown = cli("task", lease.task_id, "--server", scheduler.address)
    assert digest[:16] in shown.stdout and "video" in shown.stdout


def test_a_stale_lease_upload_is_refused_and_stores_nothing(scheduler, tmp_path):
    client = scheduler.client()
    lease = _leased(client, "stale")
    client.fail(lease, "simulator crashed", retryable=True)
    newer = client.claim("w2", ["synthetic"])
    assert newer is not None and newer.fencing_token > lease.fencing_token
    before = db_fingerprint(scheduler.db)
    with pytest.raises(StaleLease) as refused:
        client.upload_artifact(lease, 0, _video(tmp_path, "late.mp4", 4096), "video", "video/mp4")
    # The same status every stale-lease write gets, naming the upload's lease field.
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert str(refused.value).startswith("header.lease.fencing_token:")
    assert db_fingerprint(scheduler.db) == before
    assert _files(_store(scheduler.db)) == []


def test_limits_are_resource_exhausted_naming_the_limit_and_leave_nothing(start_scheduler, tmp_path):
    scheduler = start_scheduler("--max-artifact-bytes", "64K", "--max-artifacts-total-bytes", "100K")
    client = scheduler.client()
    lease = _leased(client, "limits", episodes=3)
    before = db_fingerprint(scheduler.db)
    with pytest.raises(ResourceExhausted) as per_artifact:
        client.upload_artifact(lease, 0, _video(tmp_path, "big.mp4", 64 * 1024 + 1), "video", "video/mp4")
    assert per_artifact.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-artifact-bytes" in str(per_artifact.value) and "65536" in str(per_artifact.value)
    assert db_fingerprint(scheduler.db) == before and _files(_store(scheduler.db)) == []

    client.upload_artifact(lease, 0, _video(tmp_path, "a.mp4", 60 * 1024), "video", "video/mp4")
    kept = _files(_store(scheduler.db))
    before = db_fingerprint(scheduler.db)
    with pytest.raises(ResourceExhausted) as total:
        client.upload_artifact(lease, 1, _video(tmp_path, "b.mp4", 60 * 1024), "video", "video/mp4")
    assert "--max-artifacts-total-bytes" in str(total.value) and "102400" in str(total.value)
    assert db_fingerprint(scheduler.db) == before and _files(_store(scheduler.db)) == kept


def test_bytes_that_differ_from_the_header_are_refused_and_leave_nothing(scheduler, tmp_path):
    client = scheduler.client()
    lease = _leased(client, "sha")
    data = os.urandom(5000)
    ref = pb.LeaseRef(task_id=lease.task_id, fencing_token=lease.fencing_token)

    def upload(sha256: str, size: int, body: bytes) -> None:
        header = pb.ArtifactHeader(
            lease=ref, episode_index=0, kind="video", media_type="video/mp4", size_bytes=size, sha256=sha256
        )
        stub_messages = [pb.UploadArtifactRequest(header=header), pb.UploadArtifactRequest(chunk=body)]
        with grpc.insecure_channel(scheduler.address) as channel:
            call = channel.stream_unary("/evalfleet.v1.Scheduler/UploadArtifact", lambda m: m.SerializeToString())
            call(iter(stub_messages), timeout=30)

    before = db_fingerprint(scheduler.db)
    wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(grpc.RpcError) as mismatch:
        upload(wrong, len(data), data)
    assert mismatch.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert mismatch.value.details().startswith("header.sha256: the bytes hash to")
    right = hashlib.sha256(data).hexdigest()
    with pytest.raises(grpc.RpcError) as short:
        upload(right, len(data) + 1, data)
    assert short.value.details().startswith("header.size_bytes:")
    with pytest.raises(grpc.RpcError) as long:
        upload(right, len(data) - 1, data)
    assert long.value.details().startswith("header.size_bytes:")
    assert db_fingerprint(scheduler.db) == before and _files(_store(scheduler.db)) == []


def test_only_the_scored_attempts_artifact_is_listed(scheduler, tmp_path):
    """A first attempt uploads its video, then its worker dies before reporting; the retried
    attempt's video is the one listed, and the superseded attempt cannot upload any more."""
    client = scheduler.client()
    first = _leased(client, "retry", episodes=1)
    first_video = _video(tmp_path, "first.mp4", 2048)
    client.upload_artifact(first, 0, first_video, "video", "video/mp4")
    client.fail(first, "episode process killed", retryable=True)  # what the lease's expiry would do
    second = client.claim("w2", ["synthetic"])
    assert second is not None and list(second.episodes) == [0]
    second_video = _video(tmp_path, "second.mp4", 2048)
    client.upload_artifact(second, 0, second_video, "video", "video/mp4")
    with pytest.raises(StaleLease):
        client.upload_artifact(first, 0, first_video, "video", "video/mp4")
    client.report_episode(second, 0, True)
    client.complete(second)
    (episode,) = client.task(second.task_id).episodes
    assert [a.sha256 for a in episode.artifacts] == [hashlib.sha256(second_video.read_bytes()).hexdigest()]
    assert episode.artifacts[0].fencing_token == second.fencing_token == episode.fencing_token


def test_an_upload_for_an_episode_another_attempt_scored_is_refused(scheduler, tmp_path):
    client = scheduler.client()
    lease = _leased(client, "other", episodes=2)
    client.report_episode(lease, 0, True)
    client.fail(lease, "crash on episode 1", retryable=True)
    retry = client.claim("w2", ["synthetic"])
    assert retry is not None and list(retry.episodes) == [1]
    with pytest.raises(PreconditionFailed) as refused:
        client.upload_artifact(retry, 0, _video(tmp_path, "x.mp4", 100), "video", "video/mp4")
    assert str(refused.value).startswith("header.episode_index:")
    with pytest.raises(InvalidArgument) as outside:
        client.upload_artifact(retry, 7, _video(tmp_path, "y.mp4", 100), "video", "video/mp4")
    assert str(outside.value).startswith("header.episode_index:")
    client.upload_artifact(retry, 1, _video(tmp_path, "z.mp4", 100), "video", "video/mp4")
    with pytest.raises(Conflict):
        client.upload_artifact(retry, 1, _video(tmp_path, "w.mp4", 100), "video", "video/mp4")


def test_gc_frees_a_finished_submissions_space_and_the_listing_says_so(scheduler, tmp_path):
    client = scheduler.client()
    lease = _leased(client, "gc", episodes=2)
    videos = [_video(tmp_path, f"{i}.mp4", 10_000 + i) for i in range(2)]
    for index, video in enumerate(videos):
        client.upload_artifact(lease, index, video, "video", "video/mp4")
        client.report_episode(lease, index, True)
    refused = cli("gc", "gc", "--server", scheduler.address)
    assert refused.returncode == 2 and "pending or leased" in refused.stderr
    assert len(_files(_store(scheduler.db))) == 2
    client.complete(lease)

    freed = cli("gc", "gc", "--server", scheduler.address)
    assert freed.returncode == 0, freed.stderr
    assert f"{10_000 + 10_001} bytes" in freed.stdout
    assert _files(_store(scheduler.db)) == []
    artifacts = [a for e in client.task(lease.task_id).episodes for a in e.artifacts]
    assert len(artifacts) == 2 and all(a.collected_at > 0 for a in artifacts)
    assert "collected" in cli("task", lease.task_id, "--server", scheduler.address).stdout
    with pytest.raises(NotFound, match="collected"):
        client.download_artifact(artifacts[0].sha256, io.BytesIO())
    again = cli("gc", "gc", "--server", scheduler.address, "--json")
    assert again.returncode == 0 and '"bytes_freed": 0' in again.stdout


def test_gc_keeps_a_file_another_submission_still_names(scheduler, tmp_path):
    client = scheduler.client()
    shared = _video(tmp_path, "same.mp4", 4000)
    for submission in ("a", "b"):
        client.submit([build_synthetic(1, seed=7)], "synthetic", batch_size=1, submission_id=submission)
        lease = client.claim("w1", ["synthetic"])
        client.upload_artifact(lease, 0, shared, "video", "video/mp4")
        client.complete(lease, episodes=[pb.EpisodeResult(episode_index=0, success=True)])
    assert client.collect_artifacts("a").bytes_freed == 0
    assert len(_files(_store(scheduler.db))) == 1
    assert client.collect_artifacts("b").bytes_freed == 4000
    assert _files(_store(scheduler.db)) == []


def test_a_file_left_by_a_crash_is_removed_at_start(scheduler, tmp_path):
    store = _store(scheduler.db)
    scheduler.kill()
    (store / "tmp" / "partial").write_bytes(b"half an upload")
    (store / "ab").mkdir()
    (store / "ab" / ("ab" * 32)).write_bytes(b"renamed, never named in the database")
    scheduler.restart()
    assert _files(store) == []


def test_a_version_3_database_is_upgraded_and_takes_artifacts(scheduler, tmp_path):
    client = scheduler.client()
    lease = _leased(client, "v3", episodes=1)
    client.report_episode(lease, 0, True)
    scheduler.kill()
    with sqlite3.connect(scheduler.db) as conn:  # what version 3 had: no artifact tables
        conn.execute("DROP TABLE artifacts")
        conn.execute("DROP TABLE artifact_files")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    scheduler.restart()
    with sqlite3.connect(scheduler.db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    (episode,) = client.task(lease.task_id).episodes
    assert episode.result.success and list(episode.artifacts) == []
    client.upload_artifact(lease, 0, _video(tmp_path, "after.mp4", 100), "video", "video/mp4")
    (episode,) = client.task(lease.task_id).episodes
    assert [a.size_bytes for a in episode.artifacts] == [100]


def test_artifact_get_bad_input_exits_2_in_one_line_and_writes_nothing(scheduler, tmp_path):
    folder = tmp_path / "downloads"
    folder.mkdir()
    out = folder / "out.bin"
    for sha256, says in (("xyz", "is not a sha256"), ("0" * 64, "NOT_FOUND: sha256: no artifact")):
        run = cli("artifact", "get", sha256, "--out", str(out), "--server", scheduler.address)
        assert run.returncode == 2 and says in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert list(folder.iterdir()) == []
    missing = folder / "missing" / "out.bin"
    run = cli("artifact", "get", "0" * 64, "--out", str(missing), "--server", scheduler.address)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines() == [f"scheduler: --out {missing}: no folder {missing.parent}"], run.stderr
    assert list(folder.iterdir()) == []
    no_ca = tmp_path / "no-ca.pem"
    run = cli("artifact", "get", "0" * 64, "--out", str(out), "--server", scheduler.address, "--tls-ca", str(no_ca))
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        f"scheduler: --tls-ca {no_ca}: No such file or directory"
    ]
    assert list(folder.iterdir()) == []


def test_a_store_another_database_owns_is_refused_at_start(start_scheduler, tmp_path):
    """The start-up sweep deletes what its own database does not name: a second database pointed
    at the same folder would delete the first one's files."""
    shared = tmp_path / "shared-artifacts"
    first = start_scheduler("--artifacts-dir", str(shared))
    client = first.client()
    lease = _leased(client, "owned", episodes=1)
    client.upload_artifact(lease, 0, _video(tmp_path, "kept.mp4", 1000), "video", "video/mp4")
    kept = _files(shared)
    with pytest.raises(RuntimeError, match="exited with 2"):
        start_scheduler("--artifacts-dir", str(shared))
    assert "holds the artifacts of another scheduler database" in first.log_path.read_text()
    assert _files(shared) == kept
    first.kill()
    first.restart()  # its own store: accepted, nothing swept
    assert _files(shared) == kept


def _a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("not a folder")
    return tmp_path / "file"


def _another_database_s_store(tmp_path: Path) -> Path:
    store = tmp_path / "theirs"
    store.mkdir()
    (store / OWNER_FILE).write_text("0123abcd\n")
    return store


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        (_a_file, ": Not a directory"),
        (lambda tmp: _a_file(tmp) / "below", ": Not a directory"),
        (_another_database_s_store, " holds the artifacts of another scheduler database (store id 0123abcd)"),
    ],
    ids=["a file", "below a file", "another database's store"],
)
def test_a_bad_artifacts_dir_exits_2_in_one_line_before_the_database_is_created(tmp_path, folder, said):
    artifacts_dir = folder(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    db = tmp_path / "db.sqlite"
    stderr = one_line_refusal(cli("serve", "--db", str(db), "--artifacts-dir", str(artifacts_dir), "--port", "0"))
    assert stderr.startswith("scheduler: ") and said in stderr, stderr
    assert str(artifacts_dir) in stderr
    assert not db.exists(), "no database was created"
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before, "nothing was written"


def test_a_full_artifact_disk_refuses_the_upload_leaves_nothing_and_recovers(start_scheduler, tmp_path):
    with require_small_disk(tmp_path / "disk", 8) as disk:
        store = disk / "artifacts"
        scheduler = start_scheduler("--artifacts-dir", str(store))
        client = scheduler.client()
        lease = _leased(client, "full", episodes=2)
        ballast = fill(disk)
        before = db_fingerprint(scheduler.db)
        with pytest.raises(ResourceExhausted, match="out of disk space") as full:
            client.upload_artifact(lease, 0, _video(tmp_path, "big.mp4", 256 * 1024), "video", "video/mp4")
        assert str(full.value).startswith("header.size_bytes: the artifact store")
        assert db_fingerprint(scheduler.db) == before and _files(store) == []
        ballast.unlink()
        uploaded = client.upload_artifact(lease, 0, _video(tmp_path, "again.mp4", 256 * 1024), "video", "video/mp4")
        assert uploaded.created and len(_files(store)) == 1


def test_the_dashboard_serves_an_artifact_whole_or_by_byte_range(start_scheduler, tmp_path):
    """What a browser's video element asks: the media type, the whole file, a range to seek."""
    scheduler, url = start_with_dashboard(start_scheduler)
    client = scheduler.client()
    lease = _leased(client, "http", episodes=1)
    video = _video(tmp_path, "v.mp4", 3 * 1024 * 1024 + 5)
    data = video.read_bytes()
    sha256 = client.upload_artifact(lease, 0, video, "video", "video/mp4").artifact.sha256

    def get(path: str, range_header: str = "") -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(url + path, headers={"Range": range_header} if range_header else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    status, headers, body = get(f"api/artifacts/{sha256}")
    assert (status, headers["Content-Type"], headers["Accept-Ranges"], body) == (200, "video/mp4", "bytes", data)
    status, headers, body = get(f"api/artifacts/{sha256}", "bytes=1048570-1048579")
    assert (status, headers["Content-Range"], body) == (
        206,
        f"bytes 1048570-1048579/{len(data)}",
        data[1048570:1048580],
    )
    assert get(f"api/artifacts/{sha256}", "bytes=-7")[2] == data[-7:]
    assert get(f"api/artifacts/{sha256}", "bytes=3145700-")[2] == data[3145700:]
    status, headers, _ = get(f"api/artifacts/{sha256}", f"bytes={len(data)}-")
    assert (status, headers["Content-Range"]) == (416, f"bytes */{len(data)}")
    assert get("api/artifacts/" + "0" * 64)[0] == 404
    assert get("api/artifacts/nope")[0] == 400
