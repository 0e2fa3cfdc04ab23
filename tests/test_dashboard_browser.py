"""The dashboard in a real headless browser (Debian's chromium driven by Playwright).

A submission made through the client API appears, its progress moves as a worker reports, and the
Cancel, Requeue and priority buttons change the scheduler's state; the success chart draws a bar per
task x setting with the full task names at RoboTwin's and LIBERO's scale; screenshots are kept in
the test's tmp dir.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from benchmark_task_names import LIBERO_10_TASKS, ROBOTWIN_SETTINGS, ROBOTWIN_TASKS
from dashboard_proc import start_with_dashboard

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient, selector

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
if not CHROMIUM.exists():
    pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install evalfleet[test])")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
WAIT_MS = 15_000


@contextlib.contextmanager
def _dashboard_page(url: str) -> Iterator[Any]:
    """A headless chromium page opened at ``url``; a script error on the page fails the test when
    the block ends."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url)
            yield page
            assert errors == [], errors
        finally:
            browser.close()


def _finish_one_task(client: SchedulerClient, worker_id: str) -> None:
    lease = client.claim(worker_id, ["synthetic"])
    for index in lease.episodes:
        client.report_episode(lease, index, index % 2 == 0, steps=5, wall_seconds=0.5)
    client.complete(lease)


def test_submit_watch_cancel_requeue_reprioritize_in_a_browser(start_scheduler, tmp_path):
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    manifests = [
        build_synthetic(6, seed=s, task=task, setting=setting)
        for s, (task, setting) in enumerate(
            [
                ("open_drawer", "clean"),
                ("open_drawer", "randomized"),
                ("stack_blocks", "clean"),
                ("stack_blocks", "randomized"),
            ]
        )
    ]
    client.submit(manifests, "synthetic", batch_size=3, submission_id="browser", priority=2)
    client.register_worker("gpu-worker-0", ["synthetic"], host="node-1", gpu_uuid="GPU-1234")

    with _dashboard_page(url) as page:
        card = page.locator(".submission[data-submission=browser]")
        sync_api.expect(card.locator(".progress")).to_have_text("0/24 episodes", timeout=WAIT_MS)

        for _ in range(3):
            _finish_one_task(client, "gpu-worker-0")
        client.claim("gpu-worker-0", ["synthetic"])
        sync_api.expect(card.locator(".progress")).to_have_text("9/24 episodes", timeout=WAIT_MS)
        sync_api.expect(card.locator("table.success")).to_contain_text("open_drawer", timeout=WAIT_MS)
        sync_api.expect(card.locator("table.success th")).to_have_text(["task", "clean", "randomized"])
        # 2 of 3 with its 95% Wilson interval (scipy's binomtest(2, 3): [0.2077, 0.9385]).
        sync_api.expect(card.locator("table.success")).to_contain_text("2/3 66.7% [20.8, 93.9]")

        card.locator("button[data-op=cancel]").click()
        sync_api.expect(page.locator("#message")).to_have_text("cancel: changed 5 tasks", timeout=WAIT_MS)
        sync_api.expect(card.locator(".counts")).to_contain_text("5 cancelled", timeout=WAIT_MS)
        assert client.status("browser").submissions[0].tasks.cancelled == 5
        assert client.heartbeat(client.task("browser-00003").task, "gpu-worker-0").cancelled

        card.locator("button[data-op=requeue]").click()
        sync_api.expect(page.locator("#message")).to_have_text("requeue: changed 5 tasks", timeout=WAIT_MS)
        sync_api.expect(card.locator(".counts")).to_contain_text("5 pending", timeout=WAIT_MS)

        card.locator("input.priority").fill("")
        card.locator("button[data-op=priority]").click()
        sync_api.expect(page.locator("#message")).to_have_text(
            "priority refused: priority: must be an integer", timeout=WAIT_MS
        )
        card.locator("input.priority").fill("7")
        card.locator("button[data-op=priority]").click()
        sync_api.expect(page.locator("#message")).to_have_text("priority: changed 5 tasks", timeout=WAIT_MS)
        assert {t.priority for t in client.tasks(selector(submission_id="browser", states=["pending"])).tasks} == {7}

        finisher = threading.Thread(target=_finish_one_task, args=(client, "gpu-worker-0"))
        finisher.start()
        finisher.join(30)
        sync_api.expect(card.locator(".progress")).to_have_text("12/24 episodes", timeout=WAIT_MS)
        page.screenshot(path=str(tmp_path / "dashboard-submissions.png"), full_page=True)

        page.click("a[data-view=tasks]")
        page.select_option("#filters select[name=state]", "succeeded")
        sync_api.expect(page.locator("tr.task")).to_have_count(4, timeout=WAIT_MS)
        page.screenshot(path=str(tmp_path / "dashboard-tasks.png"), full_page=True)
        page.click("a[href='#/task/browser-00003']")
        attempts = page.locator("#attempts tr.attempt")
        sync_api.expect(attempts).to_have_count(2, timeout=WAIT_MS)
        sync_api.expect(attempts.nth(0)).to_contain_text("cancelled")
        sync_api.expect(attempts.nth(1)).to_contain_text("succeeded")
        sync_api.expect(page.locator("#episodes tr")).to_have_count(4)
        page.screenshot(path=str(tmp_path / "dashboard-task.png"), full_page=True)

        page.click("a[data-view=workers]")
        sync_api.expect(page.locator("tr.worker")).to_contain_text(["GPU-1234"], timeout=WAIT_MS)
        page.screenshot(path=str(tmp_path / "dashboard-workers.png"), full_page=True)


def _video(path: Path, frames: int) -> None:
    """A real episode video as the worker records it (two 64x64 cameras, PyAV's H.264)."""
    import numpy as np

    from renderer_worker.video import VideoMode, VideoRecorder

    recorder = VideoRecorder(str(path), VideoMode.ALL, ("agentview", "wrist"))
    rng = np.random.default_rng(0)
    for step in range(frames):
        image = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
        recorder.add({"agentview": image, "wrist": image[::-1]}, step)
    assert recorder.finish(False) is not None


def test_the_episode_view_plays_the_episode_s_video(start_scheduler, tmp_path):
    pytest.importorskip("av", reason="needs PyAV (pip install evalfleet[worker])")
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    client.submit([build_synthetic(2, seed=1, task="open_drawer")], "synthetic", batch_size=2, submission_id="vid")
    lease = client.claim("gpu-worker-0", ["synthetic"])
    _video(tmp_path / "episode.mp4", 20)
    client.upload_artifact(lease, 0, tmp_path / "episode.mp4", "video", "video/mp4")
    client.report_episode(lease, 0, False, steps=20, wall_seconds=1.5)
    client.report_episode(lease, 1, True, steps=7, wall_seconds=0.5)
    client.complete(lease)

    with _dashboard_page(f"{url}#/task/{lease.task_id}") as page:
        failed = page.locator("#episodes tr.episode[data-episode='0']")
        sync_api.expect(failed).to_contain_text("task not solved in 20 steps", timeout=WAIT_MS)
        sync_api.expect(failed.locator("td").nth(5)).to_have_text("1")  # the attempt that scored it
        solved = page.locator("#episodes tr.episode[data-episode='1']")
        sync_api.expect(solved.locator("td").nth(1)).to_have_text("yes")
        assert solved.locator("video").count() == 0
        video = failed.locator("video")
        sync_api.expect(video).to_have_attribute("src", "/api/artifacts/" + _sha256(client, lease.task_id))
        # The browser fetched the artifact and decoded its header: 30 frames at 10 fps.
        page.wait_for_function("v => v.readyState >= 1 && v.duration > 0", arg=video.element_handle(), timeout=WAIT_MS)
        duration = video.evaluate("v => v.duration")
        assert duration == pytest.approx(3.0, abs=0.2), duration
        page.screenshot(path=str(tmp_path / "dashboard-episode-video.png"), full_page=True)


def _sha256(client: SchedulerClient, task_id: str) -> str:
    (video,) = [a for e in client.task(task_id).episodes for a in e.artifacts]
    return video.sha256


# k of 4 episodes succeeded: scipy's binomtest(k, 4).proportion_ci(method="wilson"), in percent.
WILSON_OF_4 = {0: (0.0, 48.99), 1: (4.559, 69.94), 2: (15.00, 85.00), 3: (30.06, 95.44), 4: (51.01, 100.0)}


def _run_submission(client: SchedulerClient, submission_id: str, tasks, settings) -> dict[tuple[str, str], int]:
    """Submits 4 episodes per task x setting and reports k of them succeeded (k cycling 0-4); returns k."""
    manifests, wins = [], {}
    for i, task in enumerate(tasks):
        for j, setting in enumerate(settings):
            manifest = build_synthetic(4, seed=i, task=task, setting=setting)
            manifests.append(manifest)
            wins[manifest.hash] = (task, setting, (i + 2 * j) % 5)
    client.submit(manifests, "synthetic", batch_size=4, submission_id=submission_id)
    while (lease := client.claim("gpu-worker-0", ["synthetic"])) is not None:
        k = wins[lease.manifest_hash][2]
        for index in lease.episodes:
            client.report_episode(lease, index, index - lease.episodes[0] < k, steps=5, wall_seconds=0.1)
        client.complete(lease)
    return {(task, setting): k for task, setting, k in wins.values()}


# Per task name in the chart: its text as shown, its box, and whether its text overflows the box.
NAMES_JS = """els => els.map(e => { const r = e.getBoundingClientRect();
  return {text: e.innerText, left: r.left, right: r.right, top: r.top, bottom: r.bottom,
          overflows: e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1}; })"""
# Per bar: its task and setting, the fill and the whisker as fractions of the track, its text, and
# where the track starts (right of the name, not under it).
BARS_JS = """rows => rows.map(row => { const track = row.querySelector(".chart-track").getBoundingClientRect();
  const fill = row.querySelector(".chart-fill").getBoundingClientRect();
  const ci = row.querySelector(".chart-ci").getBoundingClientRect();
  const name = row.closest("tbody").querySelector(".chart-name").getBoundingClientRect();
  return {task: row.dataset.task, setting: row.dataset.setting, text: row.querySelector(".chart-value").innerText,
          rate: fill.width / track.width, low: (ci.left - track.left) / track.width,
          high: (ci.right - track.left) / track.width, clear: name.right <= track.left}; })"""


def _assert_chart(page, card, names: list[str], settings: list[str], wins: dict[tuple[str, str], int]) -> None:
    """One bar per task x setting with its rate and Wilson whisker; every task name whole, inside
    the page, clear of its bars and of the next name."""
    bars = card.locator("table.chart tr.chart-bar")
    sync_api.expect(bars).to_have_count(len(names) * len(settings), timeout=WAIT_MS)
    sync_api.expect(card.locator("table.chart tr.chart-overall-bar")).to_have_count(len(settings))
    shown = card.locator("table.chart tbody.chart-group .chart-name").evaluate_all(NAMES_JS)
    assert [name["text"] for name in shown] == names
    width = page.evaluate("document.documentElement.clientWidth")
    for name in shown:
        assert not name["overflows"] and 0 <= name["left"] < name["right"] <= width, name
    for above, below in pairwise(shown):
        assert above["bottom"] <= below["top"], (above, below)
    drawn = bars.evaluate_all(BARS_JS)
    assert [(bar["task"], bar["setting"]) for bar in drawn] == [(n, s) for n in names for s in settings]
    for bar in drawn:
        k = wins[(bar["task"], bar["setting"])]
        low, high = WILSON_OF_4[k]
        assert bar["clear"], bar
        assert bar["text"].startswith(f"{25.0 * k:.1f}% [{low:.1f}, {high:.1f}] {k}/4"), bar
        assert (bar["rate"], bar["low"], bar["high"]) == pytest.approx((k / 4, low / 100, high / 100), abs=0.01), bar


def test_the_success_chart_shows_every_task_x_setting_at_robotwin_and_libero_scale(start_scheduler, tmp_path):
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    robotwin = _run_submission(client, "robotwin", ROBOTWIN_TASKS, ROBOTWIN_SETTINGS)
    libero = _run_submission(client, "libero", LIBERO_10_TASKS, ["libero_10"])
    # 50 names past 80 characters in 2 settings: RoboTwin's scale with LIBERO's names.
    long_names = [f"{name}_variant_{i // len(LIBERO_10_TASKS)}" for i, name in enumerate(LIBERO_10_TASKS * 5)]
    long = _run_submission(client, "long", long_names, ROBOTWIN_SETTINGS)

    with _dashboard_page(url) as page:
        for submission_id, names, settings, wins in (
            ("robotwin", ROBOTWIN_TASKS, ROBOTWIN_SETTINGS, robotwin),
            ("libero", LIBERO_10_TASKS, ["libero_10"], libero),
            ("long", long_names, ROBOTWIN_SETTINGS, long),
        ):
            card = page.locator(f".submission[data-submission={submission_id}]")
            _assert_chart(page, card, names, settings, wins)
            overall = card.locator("table.chart tr.chart-overall-bar")
            totals = [f"{sum(k for (_, s), k in wins.items() if s == at)}/{4 * len(names)}" for at in settings]
            sync_api.expect(overall.locator(".chart-count")).to_have_text(totals)
            card.locator("table.chart").screenshot(path=str(tmp_path / f"dashboard-chart-{submission_id}.png"))
