"""The dashboard's HTTP API against a real scheduler process: reads, operations, bad input, tokens."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest
from dashboard_proc import DASHBOARD_LINE, call, start_with_dashboard
from procs import ServiceProcess, cli, scheduler_argv, self_signed_certificate

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient, selector
from evalfleet.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.timeout(120)


def _seed(client: SchedulerClient) -> None:
    manifests = [
        build_synthetic(4, seed=1, task="pick", setting="clean"),
        build_synthetic(4, seed=2, task="pick", setting="randomized"),
    ]
    client.submit(manifests, "synthetic", batch_size=2, submission_id="dash", priority=3)
    client.register_worker("w1", ["synthetic"], host="node-7", gpu_uuid="GPU-abc")
    lease = client.claim("w1", ["synthetic"])
    for index in lease.episodes:
        client.report_episode(lease, index, index == 0, wall_seconds=1.0)
    client.complete(lease)
    client.claim("w1", ["synthetic"])


def test_overview_tasks_and_task_detail_come_from_the_database(start_scheduler):
    proc, url = start_with_dashboard(start_scheduler)
    _seed(proc.client())

    status, overview = call(url + "api/overview")
    assert status == 200
    (sub,) = overview["submissions"]
    assert (sub["submission_id"], sub["episodes_planned"], sub["episodes_completed"], sub["episodes_succeeded"]) == (
        "dash",
        8,
        2,
        1,
    )
    assert [(m["task"], m["setting"], m["completed"], m["succeeded"]) for m in sub["manifests"]] == [
        ("pick", "clean", 2, 1),
        ("pick", "randomized", 0, 0),
    ]
    # Rates with their 95% Wilson intervals (1 of 2: scipy's binomtest(1, 2) gives [0.0945, 0.9055]).
    (clean, randomized) = sub["manifests"]
    assert (clean["success_rate"], clean["success_rate_low"], clean["success_rate_high"]) == pytest.approx(
        (0.5, 0.09453120573423074, 0.9054687942657693), abs=1e-12
    )
    assert (randomized["success_rate"], randomized["success_rate_low"], randomized["success_rate_high"]) == (
        None,
        None,
        None,
    )
    assert (sub["success_rate"], sub["success_rate_low"]) == pytest.approx((0.5, 0.09453120573423074), abs=1e-12)
    assert sub["tasks"]["leased"] == 1 and sub["complete"] is False
    (worker,) = overview["workers"]
    assert (worker["state"], worker["current_task"], worker["gpu_uuid"], worker["host"]) == (
        "active",
        "dash-00001",
        "GPU-abc",
        "node-7",
    )

    status, tasks = call(url + "api/tasks?submission_id=dash&state=pending")
    assert status == 200 and [t["task_id"] for t in tasks["tasks"]] == ["dash-00002", "dash-00003"]
    status, tasks = call(url + "api/tasks?priority=4")
    assert status == 200 and tasks["tasks"] == []
    status, detail = call(url + "api/task?task_id=dash-00000")
    assert status == 200 and [a["outcome"] for a in detail["attempts"]] == ["succeeded"]
    assert [e["result"]["episode_index"] for e in detail["episodes"]] == [0, 1]

    status, page = call(url)
    assert status == 200 and "<title>evalfleet scheduler</title>" in page


def test_operations_go_through_the_same_validation_and_bad_input_changes_nothing(start_scheduler):
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    _seed(client)
    before = client.status("dash")

    refused = [
        ("api/cancel", {}, "selector"),
        ("api/cancel", {"submission": "dash"}, "submission"),
        ("api/cancel", {"task_ids": "dash-00002"}, "task_ids"),
        ("api/requeue", {"submission_id": "dash", "states": ["broken"]}, "states"),
        ("api/priority", {"submission_id": "dash"}, "priority"),
        ("api/priority", {"submission_id": "dash", "priority": "high"}, "priority"),
        ("api/priority", {"submission_id": "dash", "priority": -1}, "priority"),
        ("api/cancel", [1, 2], "body"),
    ]
    for path, body, field in refused:
        status, answer = call(url + path, body)
        assert (status, answer["field"]) == (400, field), (path, body, answer)
        assert field in answer["error"]
    status, answer = call(url + "api/cancel", b"submission_id=dash", content_type="application/x-www-form-urlencoded")
    assert (status, answer["field"]) == (400, "Content-Type")
    status, answer = call(url + "api/cancel", {"submission_id": "nope"})
    assert (status, answer["field"]) == (404, "selector.submission_id")
    status, answer = call(url + "api/tasks?limit=0")
    assert (status, answer["field"]) == (400, "limit")
    status, answer = call(url + "api/task")
    assert (status, answer["field"]) == (400, "task_id")
    assert client.status("dash") == before, "a refused request changed nothing"

    assert call(url + "api/priority", {"submission_id": "dash", "priority": 9}) == (200, {"changed": 3})
    assert call(url + "api/cancel", {"task_ids": ["dash-00002"]}) == (200, {"changed": 1})
    assert call(url + "api/requeue", {"submission_id": "dash", "states": ["cancelled"]}) == (200, {"changed": 1})
    (task,) = client.tasks(selector(task_ids=["dash-00002"])).tasks
    assert (task.state, task.priority) == (1, 9)


def test_a_token_guards_every_route_but_login(start_scheduler, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    proc, url = start_with_dashboard(start_scheduler, "--token-file", str(token_file))
    for path in ("api/overview", "api/tasks", "metrics"):
        assert call(url + path)[0] == 401
        assert call(url + path, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert call(url + "api/cancel", {"submission_id": "x"})[0] == 401
    assert call(url + "api/overview", headers={"Authorization": "Bearer s3cret"})[0] == 200

    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(url, timeout=10)
    assert (redirect.value.code, redirect.value.headers["Location"]) == (303, "/login")
    status, page = call(url + "login", b"token=wrong", content_type="application/x-www-form-urlencoded")
    assert status == 401 and "wrong token" in page
    with pytest.raises(urllib.error.HTTPError) as login:
        opener.open(urllib.request.Request(url + "login", data=b"token=s3cret"), timeout=10)
    assert login.value.code == 303
    cookie = login.value.headers["Set-Cookie"].split(";")[0]
    assert "HttpOnly" in login.value.headers["Set-Cookie"]
    assert call(url + "api/overview", headers={"Cookie": cookie})[0] == 200


def test_http_port_out_of_range_exits_2(tmp_path):
    run = cli("serve", "--db", str(tmp_path / "db.sqlite"), "--port", "0", "--http-port", "70000")
    assert run.returncode == 2 and "--http-port" in run.stderr


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_with_a_tls_certificate_the_dashboard_serves_https(tmp_path):
    key, cert = self_signed_certificate(tmp_path, "localhost")
    argv = scheduler_argv(
        tmp_path / "db.sqlite",
        "--host",
        "localhost",
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--http-port",
        "0",
    )
    server = ServiceProcess(argv, tmp_path / "tls.log").start()
    try:
        url = server.wait_for_line(DASHBOARD_LINE.search, 30).group(1)
        assert url.startswith("https://localhost:")
        context = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(url + "api/overview", context=context, timeout=10) as response:
            assert json.loads(response.read())["submissions"] == []
        with pytest.raises(OSError):
            urllib.request.urlopen(url.replace("https", "http") + "api/overview", timeout=10)
        with urllib.request.urlopen(url + "api/overview", context=context, timeout=10) as response:
            assert response.status == 200, "a failed handshake leaves the server serving"

    finally:
        server.kill()


def test_failed_attempts_show_their_reasons(start_scheduler):
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    client.submit([build_synthetic(2, seed=3, task="pick")], "synthetic", batch_size=2, submission_id="why")
    lease = client.claim("w1", ["synthetic"])
    client.fail(lease, "episode 0 ran past 1.0s", reason=pb.FAILURE_REASON_TIMEOUT)

    status, overview = call(url + "api/overview")
    assert status == 200
    (sub,) = overview["submissions"]
    assert [m["failed_attempts"] for m in sub["manifests"]] == [{"timeout": 1}]
    status, detail = call(url + "api/task?task_id=why-00000")
    assert status == 200
    assert [(a["outcome"], a["failure_reason"], a["error"]) for a in detail["attempts"]] == [
        ("failed", "timeout", "[timeout] episode 0 ran past 1.0s")
    ]
    assert detail["task"]["last_failure_reason"] == "timeout"


def test_the_overview_marks_remote_unsealed_results_and_says_how_episodes_ran(start_scheduler):
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    client.submit([build_synthetic(2, seed=5)], "synthetic", batch_size=2, submission_id="remote", execute_steps=5)
    lease = client.claim("w1", ["synthetic"])
    for index, handshake in zip(lease.episodes, ("a" * 64, "b" * 64), strict=True):
        remote = pb.RemotePolicy(dialect="openpi", url="ws://gpu-a:8000", handshake_sha256=handshake)
        client.report_episode(lease, index, True, execute_steps=5, remote=remote)

    status, overview = call(url + "api/overview")
    assert status == 200
    (sub,) = overview["submissions"]
    provenance = sub["provenance"]
    assert provenance["execute_steps"]["override"] == 5
    assert provenance["execute_steps"]["values"] == [{"execute_steps": 5, "episodes": 2}]
    assert provenance["remote"]["unsealed"] is True and provenance["remote"]["episodes"] == 2
    assert provenance["marks"][0].startswith("remote, unsealed: 2 of 2 episodes")
    assert "2 different policy servers or handshakes" in provenance["marks"][1]
    status, page = call(url)
    assert status == 200 and "remote, unsealed" in page


def test_the_success_chart_merges_a_task_x_setting_and_carries_wilson_intervals(start_scheduler):
    """The chart's data for a submission with known results: pick/clean comes from two manifests
    (2 of 4 and 1 of 2: 3 of 6), pick/randomized 4 of 4, place/clean nothing completed yet, and
    place was never evaluated randomized."""
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    manifests = [
        build_synthetic(4, seed=1, task="pick", setting="clean"),
        build_synthetic(2, seed=2, task="pick", setting="clean"),
        build_synthetic(4, seed=3, task="pick", setting="randomized"),
        build_synthetic(4, seed=4, task="place", setting="clean"),
    ]
    successes = {manifests[0].hash: 2, manifests[1].hash: 1, manifests[2].hash: 4}
    client.submit(manifests, "synthetic", batch_size=4, submission_id="chart")
    for _ in successes:
        lease = client.claim("w1", ["synthetic"])
        assert lease is not None and lease.manifest_hash in successes
        for index in lease.episodes:
            client.report_episode(lease, index, index - lease.episodes[0] < successes[lease.manifest_hash])
        client.complete(lease)

    status, overview = call(url + "api/overview")
    assert status == 200
    (sub,) = overview["submissions"]
    chart = sub["chart"]
    assert chart["settings"] == ["clean", "randomized"]
    assert [(t["benchmark"], t["task"], t["name"]) for t in chart["tasks"]] == [
        ("synthetic", "pick", "pick"),
        ("synthetic", "place", "place"),
    ]
    (pick_clean, pick_randomized), (place_clean, place_randomized) = (t["cells"] for t in chart["tasks"])
    # Intervals as scipy's binomtest(k, n).proportion_ci(method="wilson") gives them.
    assert pick_clean == {
        "planned": 6,
        "completed": 6,
        "succeeded": 3,
        "success_rate": 0.5,
        "success_rate_low": pytest.approx(0.18761630648265054, abs=1e-12),
        "success_rate_high": pytest.approx(0.8123836935173494, abs=1e-12),
    }
    assert pick_randomized == {
        "planned": 4,
        "completed": 4,
        "succeeded": 4,
        "success_rate": 1.0,
        "success_rate_low": pytest.approx(0.5101091635454027, abs=1e-12),
        "success_rate_high": pytest.approx(1.0, abs=1e-12),
    }
    assert place_clean == {
        "planned": 4,
        "completed": 0,
        "succeeded": 0,
        "success_rate": None,
        "success_rate_low": None,
        "success_rate_high": None,
    }
    assert place_randomized is None
    overall_clean, overall_randomized = chart["overall"]
    assert (overall_clean["planned"], overall_clean["completed"], overall_clean["succeeded"]) == (10, 6, 3)
    assert (overall_clean["success_rate_low"], overall_clean["success_rate_high"]) == pytest.approx(
        (0.18761630648265054, 0.8123836935173494), abs=1e-12
    )
    assert (overall_randomized["completed"], overall_randomized["success_rate_low"]) == pytest.approx(
        (4, 0.5101091635454027), abs=1e-12
    )
