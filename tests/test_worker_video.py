"""Episode videos of the policy's view: real scheduler, inference server and worker processes, the
MP4 uploaded as the episode's "video" artifact and decoded back with PyAV.

The LIBERO test is small (64x64 cameras, two of them, 2 settle steps, 6 policy steps); it also
checks that rendering every step for the video (``--video-every-step``) leaves the simulation as it
was: the same trace digest as the run that rendered only what the policy was shown.
"""

from __future__ import annotations

import importlib.util
import io

import pytest
from procs import build_libero_manifests, submit_libero, wait_settled, wait_until

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.policy_api.client import PolicyClient
from evalfleet.scheduler_api.client import SchedulerClient, selector
from inference_server.checkpoint import seal
from renderer_worker.video import OUTCOME_FRAMES

av = pytest.importorskip("av")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CAMERA = 64
MAX_STEPS = 6
CHUNK = 4


def _decoded(client: SchedulerClient, sha256: str) -> tuple[int, int, int, float]:
    """Frames, width, height and duration (seconds) of a stored video, decoded by PyAV."""
    data = io.BytesIO()
    client.download_artifact(sha256, data)
    data.seek(0)
    with av.open(data) as container:
        frames = list(container.decode(video=0))
        duration = float(container.duration or 0) / 1e6
    return len(frames), frames[0].width, frames[0].height, duration


def _videos(client: SchedulerClient, submission: str) -> dict[int, list]:
    """Each scored episode's video artifacts, by episode index."""
    (task,) = client.tasks(selector(submission)).tasks
    episodes = client.task(task.task_id).episodes
    return {e.result.episode_index: [a for a in e.artifacts if a.kind == "video"] for e in episodes}


def test_failures_keeps_the_video_of_failed_episodes_only(start_scheduler, start_policy, start_worker, tmp_path):
    scheduler = start_scheduler()
    client = scheduler.client()
    policy = start_policy("syn")
    with PolicyClient(policy.address) as probe:
        digest = probe.identity().digest
    manifest = build_synthetic(6, seed=3, mean_seconds=0.5, success_rate=0.5, sigma=0.01)
    succeeds = {i: bool(entry["success"]) for i, entry in enumerate(manifest.episodes)}
    assert set(succeeds.values()) == {True, False}, "the manifest has both outcomes"
    client.submit([manifest], "synthetic", batch_size=6, submission_id="vid", checkpoint=digest)
    options = ("--adapter-option", "synthetic.time_scale=0.2")
    start_worker(scheduler.address, [policy.address], "--video", "failures", *options)
    wait_until(lambda: client.status("vid").tasks.succeeded == 1, 120, "the task done")

    videos = _videos(client, "vid")
    assert sorted(videos) == list(range(6))
    for index, found in videos.items():
        if succeeds[index]:
            assert found == [], f"episode {index} succeeded: no video kept"
        else:
            (video,) = found
            assert video.media_type == "video/mp4" and video.size_bytes > 0
            frames, _, _, duration = _decoded(client, video.sha256)
            assert frames > OUTCOME_FRAMES and duration > 0
    # A deleted video leaves nothing on the worker's disk either.
    kept = {p.name for p in (tmp_path / "episodes").rglob("*.mp4")}
    assert kept == {f"episode-{i:06d}.mp4" for i, ok in succeeds.items() if not ok}


@pytest.mark.libero
@pytest.mark.skipif(importlib.util.find_spec("libero") is None, reason="LIBERO is not installed")
def test_libero_videos_show_both_cameras_and_every_step_keeps_the_simulation(
    start_scheduler, start_policy, start_worker, tmp_path
):
    scheduler = start_scheduler()
    client = scheduler.client()
    out = tmp_path / "manifests"
    build_libero_manifests(out, "0", 1, CAMERA, MAX_STEPS)
    root = tmp_path / "checkpoints"
    (root / "lib").mkdir(parents=True)
    seal(
        root / "lib",
        "deterministic",
        {
            "cameras": [
                {"name": "agentview", "height": CAMERA, "width": CAMERA},
                {"name": "robot0_eye_in_hand", "height": CAMERA, "width": CAMERA},
            ],
            "state": [{"name": "robot0_eef_pos", "length": 3}],
            "action_dim": 7,
            "chunk_length": CHUNK,
        },
    )
    policy = start_policy("lib", root=root)

    runs = {"shown": ("--video", "all"), "every": ("--video", "all", "--video-every-step")}
    digests = {}
    for name, flags in runs.items():
        submit_libero(scheduler.address, policy.address, out, name)
        worker = start_worker(scheduler.address, [policy.address], "--routes", "libero", *flags, worker_id=name)
        wait_settled(client, name, 420)
        worker.kill()
        (task,) = client.tasks(selector(name)).tasks
        (episode,) = client.task(task.task_id).episodes
        assert episode.result.steps == MAX_STEPS and not episode.result.success
        digests[name] = episode.result.trace_digest
        (video,) = _videos(client, name)[0]
        frames, width, height, duration = _decoded(client, video.sha256)
        # Shown: the first observation and the one after the first chunk (the second ends the
        # episode unobserved). Every step: the first observation and one per step.
        expected = 2 if name == "shown" else 1 + MAX_STEPS
        assert (frames, width) == (expected + OUTCOME_FRAMES, 2 * CAMERA), name
        assert height > CAMERA and duration > 0
    assert digests["shown"] == digests["every"], "rendering every step changed the simulation"


@pytest.mark.timeout(30)
def test_video_every_step_without_a_video_is_refused_in_one_line(capsys):
    from renderer_worker.cli import main

    assert main(["--policy", "h:1", "--cpu", "--video", "none", "--video-every-step"]) == 2
    err = capsys.readouterr().err
    assert err == "renderer-worker: --video-every-step needs --video failures or all\n"


@pytest.mark.timeout(30)
def test_a_video_that_cannot_be_written_is_dropped_not_the_episode(tmp_path, caplog):
    import numpy as np

    from renderer_worker.video import VideoMode, VideoRecorder

    (tmp_path / "file").write_text("not a folder")
    recorder = VideoRecorder(str(tmp_path / "file" / "episode.mp4"), VideoMode.ALL, ("camera",))
    recorder.add({"camera": np.zeros((8, 8, 3), dtype=np.uint8)}, 0)  # mkdir fails: logged, not raised
    recorder.add({"camera": np.zeros((8, 8, 3), dtype=np.uint8)}, 1)
    assert recorder.finish(False) is None and recorder.frames == 0
    assert "episode video" in caplog.text and "dropped" in caplog.text


def test_the_extras_a_worker_is_installed_with_bring_the_default_videos_encoder() -> None:
    """`renderer-worker --video failures` is the default, so installing the worker for LIBERO or
    RoboTwin alone must bring PyAV and Pillow (the `worker` extra), as the installed metadata says."""
    import importlib.metadata

    requirements = importlib.metadata.requires("evalfleet") or []
    worker = {r.split(";")[0].split("==")[0] for r in requirements if r.endswith('extra == "worker"')}
    assert worker == {"av", "pillow"}
    for extra in ("libero", "robotwin"):
        assert f'evalfleet[worker]; extra == "{extra}"' in requirements, extra
