"""Simulator stacks end to end: a LIBERO manifest is run only by a worker on the stack it was built under.

Real processes throughout: `scheduler manifest build libero` under openpi's MuJoCo 3.2.3 +
robosuite 1.4.1 stack (the overlay `make stacks` builds, `.stacks/`), the scheduler with its
dashboard, an inference server, a worker on this environment's stack (MuJoCo 2.3.7) and one started
with `renderer-worker --stack`. The first worker's claims are answered empty while the task waits,
pending, with no attempt spent (no claim-and-fail); `scheduler status` names the stack it needs and
no worker for it; the second worker claims it and runs a real LIBERO episode (a few steps) on that
stack.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from dashboard_proc import call, start_with_dashboard
from libero_guard import LIBERO_MISSING, REASON
from procs import cli, require_built, submit_libero, wait_settled, wait_until
from prometheus_client.parser import text_string_to_metric_families
from run_specs import oracle_document, write_spec
from test_libero_e2e import libero_checkpoint

from benchmarks import installed_stacks, stack_id
from evalfleet.v1 import scheduler_pb2 as pb
from manifests import format as manifest_format
from manifests.overlays import overlay, stacks_dir

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

STACK = "mujoco-3.2.3_robosuite-1.4.1"
require_built(stacks_dir() / STACK, "make stacks")

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(600)]

CAMERA = 64
MAX_STEPS = 3


def changed_stack(document: dict[str, Any], stack: str) -> dict[str, Any]:
    """The spec with another fleet.stack and an output of its own."""
    return {
        **document,
        "id": "other-stack",
        "output": document["output"] + "-other",
        "fleet": {**document["fleet"], "stack": stack},
    }


def _empty_claims(url: str) -> float:
    status, text = call(url + "metrics")
    assert status == 200
    return next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "evalfleet_scheduler_claims_total" and sample.labels == {"outcome": "empty"}
    )


def test_a_manifest_runs_only_on_the_stack_it_was_built_under(start_scheduler, tmp_path, start_policy, start_worker):
    out = tmp_path / "manifests"
    on_stack = {"PYTHONPATH": os.pathsep.join([str(overlay(STACK)), os.environ.get("PYTHONPATH", "")])}
    built = cli(
        "manifest", "build", "libero", "--out", str(out), "--suite", "libero_object", "--tasks", "0",
        "--trials", "1", "--camera-size", str(CAMERA), "--wait-steps", "2", "--max-steps", str(MAX_STEPS),
        env=on_stack, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("*.json")
    manifest = manifest_format.read(path)
    assert (manifest.data["versions"]["mujoco"], manifest.data["versions"]["robosuite"]) == ("3.2.3", "1.4.1")
    needed = stack_id("libero", manifest.data["versions"])
    (here,) = installed_stacks()
    assert needed != here and needed.startswith("libero-mujoco3.2.3-robosuite1.4.1-")

    scheduler, url = start_with_dashboard(start_scheduler, "--lease-seconds", "30")
    client = scheduler.client()
    policy = start_policy("lib", root=libero_checkpoint(tmp_path / "checkpoints"))
    submit_libero(scheduler.address, policy.address, out, "stacked")
    (task,) = client.tasks().tasks
    assert task.stack == needed

    # A worker on this environment's stack: its claims come back empty, the task stays pending.
    start_worker(scheduler.address, [policy.address], "--routes", "libero", worker_id="here")
    wait_until(lambda: [w.stacks for w in client.workers()] == [[here]], 60, "worker `here` registered its stack")
    before = _empty_claims(url)
    wait_until(lambda: _empty_claims(url) >= before + 3, 60, "three more empty claims")
    task = client.task(task.task_id).task
    assert (task.state, task.attempts, task.worker_id) == (pb.TASK_STATE_PENDING, 0, ""), task  # never leased
    (demand,) = client.status().stacks
    assert (demand.stack, demand.pending_tasks, list(demand.workers)) == (needed, 1, [])
    shown = cli("status", "--server", scheduler.address)
    assert shown.returncode == 0, shown.stderr
    assert needed in shown.stdout and "no connected worker" in shown.stdout, shown.stdout
    status, overview = call(url + "api/overview")
    assert status == 200, overview
    assert overview["stacks"] == [{"stack": needed, "pending_tasks": 1, "workers": []}], overview["stacks"]

    # A worker on the manifest's stack claims it and runs the episode under MuJoCo 3.2.3.
    other = start_worker(scheduler.address, [policy.address], "--routes", "libero", "--stack", STACK, worker_id="there")
    wait_settled(client, "stacked", 300)
    summary = client.summary("stacked")
    assert summary.complete and summary.tasks.succeeded == 1 and list(summary.workers) == ["there"], summary
    (attempt,) = client.task(task.task_id).attempts
    assert attempt.worker_id == "there"
    (stored,) = client.task(task.task_id).episodes
    assert (stored.worker_id, stored.result.steps) == ("there", MAX_STEPS)
    workers = {w.worker_id: w for w in client.workers()}
    assert list(workers["there"].stacks) == [needed]
    assert json.loads(workers["there"].versions_json)["mujoco"] == "3.2.3"
    assert f"stacks {needed}" in Path(other.log_path).read_text()


def test_scheduler_run_builds_and_runs_on_the_specs_stack(tmp_path: Path) -> None:
    """`scheduler run` with `fleet.stack`: the manifests are built in a process on the stack's
    overlay, so they pin the stack its workers run, and the episode runs there (MuJoCo 3.2.3)."""
    output = tmp_path / "out"
    document = oracle_document(tmp_path, "on-stack", output, tasks="0", trials=1, max_steps=MAX_STEPS)
    document["fleet"] = {"workers": 1, "stack": STACK}
    document["video"] = "none"
    run = cli("run", str(write_spec(tmp_path, document)), timeout=500)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((output / "RESULTS.json").read_text())
    assert results["overall"]["completed"] == 1, results["overall"]
    ((worker),) = results["workers"]
    assert worker["versions"]["mujoco"] == "3.2.3", worker
    (manifest_path,) = [p for p in (output / "manifests").rglob("*.json") if p.name != "BUILT.json"]
    manifest = manifest_format.read(manifest_path)
    assert manifest.data["versions"]["mujoco"] == "3.2.3"
    assert stack_id("libero", manifest.data["versions"]) != installed_stacks()[0]
    unbuilt = changed_stack(document, "no-such-stack")
    refused = cli("run", str(write_spec(tmp_path, unbuilt)), "--dry-run")
    assert refused.returncode == 2 and "fleet.stack: --stack no-such-stack: not built in" in refused.stderr
    assert not Path(unbuilt["output"]).exists()
