"""RoboTwin 2.0's own code at c3ddfa8, unedited, running evalfleet episodes on the CPU stack.

A manifest is scanned by `scheduler manifest build robotwin` with RoboTwin's real scripted expert
(planning with mplib, benchmarks/robotwin/cpu_stack.py), the expert is deterministic across fresh
processes (and scans of two tasks in processes of their own give the manifests one process gives),
and `scheduler run` of a RoboTwin spec, with the expert's rows served by the `replay`
backend (`python -m benchmarks.robotwin.expert`), solves the episode through scheduler, workers and
inference server by RoboTwin's own latched check_success. On stack_blocks_two also: observations
rendered on demand are `get_obs()`'s images, holding still solves nothing and the canary says so,
a worker killed with SIGKILL mid-episode leaves the same results as an uninterrupted run, the
episode packaged as a published subset and imported from a spec plays as the scanned one does, the
session's causal history holds the commands RoboTwin executed, a tiny LeRobot ACT runs from its
config.json alone, and docs/remote.md's StarVLA RoboTwin recipe sends the double of StarVLA's server
what StarVLA's own client sends from upstream's loop; and
the code still gives the description of its API the RoboTwin double is checked against in CI, and
upstream's own script/eval_policy.py and an evalfleet episode play the same first actions alike.
Everything runs in .venv-robotwin (`make robotwin`) on a checkout that EVALFLEET_ROBOTWIN_ROOT
names, with ../shared/robotwin-assets laid over its assets/ (docs/benchmarks.md says how to make
one). The five tasks built from box primitives, the only ones whose assets are obtainable here,
each with its first accepted seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from procs import wait_until
from robotwin_interface import FIXTURE

from evalfleet.processes import ServiceProcess, free_port

if not os.environ.get("EVALFLEET_ROBOTWIN_ROOT"):
    pytest.skip("EVALFLEET_ROBOTWIN_ROOT is not set (a RoboTwin checkout at c3ddfa8)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ["EVALFLEET_ROBOTWIN_ROOT"])
PYTHON = Path(os.environ.get("EVALFLEET_ROBOTWIN_PYTHON", REPO / ".venv-robotwin" / "bin" / "python"))
LEROBOT_PYTHON = Path(os.environ.get("EVALFLEET_LEROBOT_PYTHON", REPO / ".venv-lerobot" / "bin" / "python"))
REPLAY = Path(__file__).with_name("robotwin_expert_replay.py")
OBSERVE = Path(__file__).with_name("robotwin_observe_check.py")
INTERFACE = Path(__file__).with_name("robotwin_interface.py")
STARVLA_UPSTREAM = Path(__file__).with_name("robotwin_starvla_upstream.py")
STARVLA_DOUBLE = REPO / "tests" / "inference_server" / "starvla_double.py"
sys.path.append(str(STARVLA_DOUBLE.parent))  # docs_recipes: the StarVLA recipes docs/remote.md prints
from docs_recipes import recipe, robotwin_reply  # noqa: E402

TASKS = ("stack_blocks_two", "stack_blocks_three", "handover_block", "blocks_ranking_rgb", "blocks_ranking_size")
CPU_KEYS = {"robotwin_stack": "cpu", "sapien": "3.0.3", "robotwin_shader": "default"}


def _run(*args: str, timeout: float, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return done


def _step_limit(task: str) -> int:
    """The task's step limit in the checkout's task_config/_eval_step_limit.yml (`task: N` lines)."""
    for line in (ROOT / "task_config" / "_eval_step_limit.yml").read_text().splitlines():
        name, _, limit = line.partition(":")
        if name.strip() == task:
            return int(limit)
    raise AssertionError(f"{task} has no step limit in _eval_step_limit.yml")


@pytest.fixture(scope="module", params=TASKS)
def manifest(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert PYTHON.is_file(), f"{PYTHON} is not built (make robotwin)"
    out = tmp_path_factory.mktemp("manifests")
    _run(
        str(PYTHON), "-m", "scheduler.cli", "manifest", "build", "robotwin", "--robotwin-root", str(ROOT),
        "--tasks", request.param, "--settings", "clean-seen", "--episodes", "1", "--max-candidates", "3",
        "--out", str(out), timeout=600,
    )  # fmt: skip
    (path,) = out.glob("*.json")
    return path


@pytest.mark.timeout(700)
def test_manifest_build_scans_seeds_with_the_real_expert_and_records_the_cpu_stack(manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    task = data["task"]
    assert (data["benchmark"], task, data["setting"]) == ("robotwin", task, "clean-seen") and task in TASKS
    assert data["source"]["first_seed"] == 100000
    (episode,) = data["episodes"]
    assert episode["seed"] >= 100000 and episode["step_limit"] == _step_limit(task) and episode["instruction"]
    versions = data["versions"]
    assert {key: versions[key] for key in CPU_KEYS} == CPU_KEYS
    assert versions["robotwin_planner"].startswith("mplib-0.2.1-screw")
    assert len(versions["robotwin_assets"]) == 64


@pytest.mark.timeout(400)
def test_the_expert_plays_the_same_rows_in_fresh_processes(manifest: Path) -> None:
    runs = [
        json.loads(_run(str(PYTHON), str(REPLAY), str(ROOT), str(manifest), "0", timeout=180).stdout.splitlines()[-1])
        for _ in range(2)
    ]
    assert runs[0]["expert"] == "accepted" and runs[0]["rows"] > 100
    assert runs[0] == runs[1]


@pytest.mark.timeout(900)
def test_scans_spread_over_processes_give_the_manifests_of_one_process(tmp_path: Path) -> None:
    def build(jobs: int) -> list[str]:
        out = tmp_path / f"jobs-{jobs}"
        _run(
            str(PYTHON), "-m", "scheduler.cli", "manifest", "build", "robotwin", "--robotwin-root", str(ROOT),
            "--tasks", "stack_blocks_two", "handover_block", "--settings", "clean-seen", "--episodes", "1",
            "--max-candidates", "3", "--observation-digest", "--jobs", str(jobs), "--out", str(out), timeout=600,
        )  # fmt: skip
        return sorted(path.name for path in out.glob("*.json"))

    spread = build(2)
    assert len(spread) == 2 and spread == build(1)


def _fleet_run(
    folder: Path,
    submission: str,
    rows: Path,
    checkpoint: dict[str, Any] | None = None,
    pythonpath: Path | None = None,
    **spec: Any,
) -> tuple[str, dict[str, Any]]:
    """`scheduler run` (from .venv-robotwin) of the manifest's task with ``rows`` served by `replay`
    (or with ``checkpoint``; a plug-in backend's module in ``pythonpath``)."""
    manifest = json.loads(next((folder / "manifests").glob("*.json")).read_text())
    document = {
        "id": submission,
        "output": str(folder / "runs" / submission),
        "checkpoint": checkpoint or {"path": str(rows.parent), "backend": "replay", "settings": {"chunk_length": 10}},
        "benchmark": {
            "robotwin": {
                "root": str(ROOT),
                "tasks": [manifest["task"]],
                "settings": ["clean-seen"],
                "episodes": 1,
                "max_candidates": 3,
            }
        },
        "fleet": {"workers": 2, "lease_seconds": 10},
        **spec,
    }
    path = folder / f"{submission}.yaml"
    path.write_text(yaml.safe_dump(document))
    run = _run(str(PYTHON), "-m", "scheduler.cli", "run", str(path), timeout=900, pythonpath=pythonpath)
    return run.stdout + run.stderr, json.loads((folder / "runs" / submission / "RESULTS.json").read_text())


def _results(output: Path) -> dict[tuple[str, int], tuple[int, int, str]]:
    with sqlite3.connect(f"file:{output / 'scheduler.sqlite'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT manifest_hash, episode_index, success, steps, trace_digest FROM episode_results")
        return {(row[0], row[1]): (row[2], row[3], row[4]) for row in rows}


@pytest.fixture(scope="module")
def expert(manifest: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the task's own: the manifest under manifests/, the expert's rows of its episode
    as a replay checkpoint's expert/rows.npz. Returns the rows."""
    folder = tmp_path_factory.mktemp("fleet")
    (folder / "manifests").mkdir()
    shutil.copy(manifest, folder / "manifests")
    rows = folder / "expert" / "rows.npz"
    _run(
        str(PYTHON), "-m", "benchmarks.robotwin.expert", "--robotwin-root", str(ROOT), "--out", str(rows),
        str(manifest), timeout=300,
    )  # fmt: skip
    return rows


@pytest.mark.timeout(1200)
def test_the_experts_rows_solve_the_episode_through_the_fleet(manifest: Path, expert: Path) -> None:
    folder = expert.parent.parent
    output, results = _fleet_run(folder, "expert", expert)
    assert "1/1 episodes solved" in output, output[-3000:]
    ((manifest_hash, _), (success, steps, _)) = next(iter(_results(folder / "runs" / "expert").items()))
    assert manifest_hash == manifest.stem, "the spec's scan is the scan the rows were recorded on"
    limit = json.loads(manifest.read_text())["episodes"][0]["step_limit"]
    assert success == 1 and steps < limit, "RoboTwin's latched check_success ended the episode before its limit"
    assert results["checkpoint_identity"]["backend"] == "replay"


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """stack_blocks_two's first episode, its manifest (with the first observation's digest) and the
    expert's rows, in a folder of its own."""
    folder = tmp_path_factory.mktemp("stack_blocks_two")
    _run(
        str(PYTHON), "-m", "scheduler.cli", "manifest", "build", "robotwin", "--robotwin-root", str(ROOT),
        "--tasks", "stack_blocks_two", "--settings", "clean-seen", "--episodes", "1", "--max-candidates", "3",
        "--observation-digest", "--out", str(folder / "manifests"), timeout=600,
    )  # fmt: skip
    (manifest,) = (folder / "manifests").glob("*.json")
    rows = folder / "expert" / "rows.npz"
    _run(
        str(PYTHON), "-m", "benchmarks.robotwin.expert", "--robotwin-root", str(ROOT), "--out", str(rows),
        str(manifest), timeout=300,
    )  # fmt: skip
    return manifest, rows


@pytest.mark.timeout(600)
def test_observations_rendered_on_demand_are_get_obs_images(blocks: tuple[Path, Path]) -> None:
    manifest, _ = blocks
    report = json.loads(_run(str(PYTHON), str(OBSERVE), str(ROOT), str(manifest), timeout=500).stdout.splitlines()[-1])
    assert report == {
        "cameras": ["head_camera", "left_camera", "right_camera"],
        "reset_is_get_obs": True,
        "step_is_get_obs": True,
        "chunk_cameras": ["head_camera"],
        "chunk_is_step": True,
        "same_trace": True,
    }


@pytest.mark.timeout(400)
def test_robotwin_still_gives_the_description_the_doubles_fixture_holds(tmp_path: Path) -> None:
    """tests/doubles/robotwin_interface.json, which the double is checked against in CI."""
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    task, setting = recorded["recorded"]["task"], recorded["recorded"]["setting"]
    _run(str(PYTHON), str(INTERFACE), str(ROOT), task, setting, str(tmp_path / "interface.json"), timeout=300)
    assert json.loads((tmp_path / "interface.json").read_text()) == recorded["interface"]


@pytest.mark.timeout(700)
def test_upstreams_eval_policy_and_an_episode_agree_action_for_action(tmp_path: Path) -> None:
    """scripts/proofs/robotwin_eval_policy.py on its first 12 actions (docs/reproducing.md has full runs)."""
    out = tmp_path / "proof.json"
    _run(
        str(PYTHON), "-m", "scripts.proofs.robotwin_eval_policy", "--robotwin-root", str(ROOT),
        "--tasks", "stack_blocks_two", "--episodes", "1", "--max-actions", "12", "--out", str(out), timeout=600,
    )  # fmt: skip
    summary = json.loads(out.read_text())
    (row,) = summary["rows"]
    assert (summary["identical"], row["actions"], row["differences"]) == (1, 12, [])
    assert row["seed"] >= 100000 and row["instruction"]


@pytest.mark.timeout(1200)
def test_the_sessions_history_holds_the_commands_robotwin_executed(blocks: tuple[Path, Path], tmp_path: Path) -> None:
    """The `replay` backend finds its place in the episode's rows from the session's causal history;
    here it also logs that history at every request (robotwin_history_backend.py), and only 7 rows
    of each 10-row chunk run (`actions_per_chunk: 7`), so the history must hold what ran, not what
    was answered. Asserted: at every request, the history's steps are the requests before it and
    its executed commands, in order, are the rows RoboTwin executed, 7 per chunk, every float64 bit;
    and the episode ends as a plain replay's with whole chunks does (the same success step and trace
    digest, which chains every command RoboTwin executed and the state after it)."""
    manifest, rows = blocks
    folder = manifest.parent.parent
    plugin_rows = tmp_path / "history" / "rows.npz"
    plugin_rows.parent.mkdir()
    shutil.copy(rows, plugin_rows)
    log = tmp_path / "history.jsonl"
    checkpoint = {
        "path": str(plugin_rows.parent),
        "backend": "robotwin_history_backend:recording",
        "settings": {"chunk_length": 10, "history_log": str(log)},
    }
    output, _ = _fleet_run(folder, "history", rows, checkpoint, Path(__file__).parent, actions_per_chunk=7)
    assert "1/1 episodes solved" in output, output[-3000:]
    _fleet_run(folder, "whole-chunks", rows)
    ((_, _), history_run) = next(iter(_results(folder / "runs" / "history").items()))
    ((_, _), plain_run) = next(iter(_results(folder / "runs" / "whole-chunks").items()))
    assert history_run == plain_run and history_run[0] == 1
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    with np.load(rows) as recorded:
        expert = recorded[requests[0]["episode_id"]]
    assert len(requests) == -(-history_run[1] // 7), "a request per 7 executed rows until success"
    for index, request in enumerate(requests):
        assert [step for step, _ in request["entries"]] == list(range(index))
        assert all(len(executed) == 7 for _, executed in request["entries"])
        executed = np.asarray([row for _, chunk in request["entries"] for row in chunk], dtype=np.float64)
        ran = expert[np.minimum(np.arange(7 * index), len(expert) - 1)]
        assert executed.reshape(ran.shape).tobytes() == ran.tobytes(), f"request {index}"


@pytest.mark.timeout(1200)
def test_holding_still_solves_nothing_and_the_canary_says_so(blocks: tuple[Path, Path]) -> None:
    manifest, rows = blocks
    still = manifest.parent.parent / "still" / "rows.npz"
    still.parent.mkdir()
    with np.load(rows) as recorded:
        np.savez(still, **{episode: recorded[episode][:1] for episode in recorded.files})
    output, results = _fleet_run(manifest.parent.parent, "still", still, canary={"tasks": 1})
    assert results["overall"]["succeeded"] == 0 and results["overall"]["completed"] == 1
    (verdict,) = [line for line in output.splitlines() if "canary" in line and "over 1 episodes" in line]
    assert "BROKEN" in verdict and "no_success" in verdict and "actions_constant" in verdict, verdict


@pytest.mark.timeout(1800)
def test_a_worker_killed_mid_episode_leaves_the_results_of_an_uninterrupted_run(blocks: tuple[Path, Path]) -> None:
    manifest, rows = blocks
    folder = manifest.parent.parent
    _, calm = _fleet_run(folder, "calm", rows)
    cut = folder / "runs" / "cut"
    spec = folder / "cut.yaml"
    spec.write_text((folder / "calm.yaml").read_text().replace("calm", "cut"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    with open(folder / "cut.log", "w") as log:
        run = subprocess.Popen(
            [str(PYTHON), "-m", "scheduler.cli", "run", str(spec)], cwd=REPO, env=env, stdout=log, stderr=log
        )
        try:
            episode_log = cut / "episodes" / "cut-00000" / "episode-000000.jsonl"
            wait_until(lambda: episode_log.is_file() and episode_log.read_text().count('"step"') >= 5, 600, "steps")
            workers = [entry for entry in json.loads((cut / "fleet.json").read_text()) if "worker" in entry["name"]]
            logs = {w["pid"]: (cut / "logs" / f"{w['name']}.log").read_text() for w in workers}
            claimed = [pid for pid, text in logs.items() if "claimed cut-00000" in text]
            assert len(claimed) == 1, claimed
            assert not _results(cut), "killed mid-episode: nothing is stored yet"
            os.kill(claimed[0], signal.SIGKILL)
            assert run.wait(timeout=900) == 0, (folder / "cut.log").read_text()[-3000:]
        finally:
            run.kill()
    assert list(_results(cut).values()) == list(_results(folder / "runs" / "calm").values())
    assert json.loads((cut / "RESULTS.json").read_text())["overall"] == calm["overall"]
    logs = "".join(path.read_text() for path in (cut / "logs").glob("cut-worker-*.log"))
    assert "claimed cut-00000 (attempt 2" in logs, "the other worker ran the episode again"


def _subset_package(manifest: Path, package: Path, step_limit: int | None = None) -> Path:
    """The manifest's one episode as a published subset package lays it out (seed, instruction,
    the draw and the first observation's digest), with the manifest's step limit or ``step_limit``."""
    scanned = json.loads(manifest.read_text())
    (episode,) = scanned["episodes"]
    package.mkdir()
    fields = ("episode_id", "seed", "instruction", "instruction_draw", "initial_observation_digest")
    row = {"task": scanned["task"], "setting": "clean", **{name: episode[name] for name in fields}}
    (package / "episodes.jsonl").write_text(json.dumps(row) + "\n")
    metadata = {
        "name": "stack-blocks-two-first",
        "robotwin_commit": (ROOT / "ROBOTWIN_COMMIT").read_text().strip(),
        "settings": {"clean": {"task_config": "demo_clean", "instruction_type": "seen"}},
        "step_limits": {scanned["task"]: step_limit or episode["step_limit"]},
    }
    (package / "subset.json").write_text(json.dumps(metadata))
    sums = [
        f"{hashlib.sha256((package / n).read_bytes()).hexdigest()}  {n}\n" for n in ("episodes.jsonl", "subset.json")
    ]
    (package / "SHA256SUMS").write_text("".join(sums))
    return package


@pytest.mark.timeout(1200)
def test_a_subset_package_of_the_scanned_episode_runs_as_the_scan_does(
    blocks: tuple[Path, Path], tmp_path: Path
) -> None:
    """The scanned episode as a published subset package lays it out (seed, instruction, the draw
    and the first observation's digest), imported from the spec's `subset`: the episode checks the
    draw and the digest at its reset, and the expert's rows play it as they play the scan's."""
    manifest, rows = blocks
    package = _subset_package(manifest, tmp_path / "subset")
    folder = manifest.parent.parent
    subset_output, _ = _fleet_run(
        folder, "subset", rows, benchmark={"robotwin": {"subset": str(package), "root": str(ROOT)}}
    )
    scan_output, _ = _fleet_run(folder, "scan", rows)
    assert "1/1 episodes solved" in subset_output and "1/1 episodes solved" in scan_output, subset_output[-3000:]
    ((subset_hash, _), subset_result) = next(iter(_results(folder / "runs" / "subset").items()))
    ((scan_hash, _), scan_result) = next(iter(_results(folder / "runs" / "scan").items()))
    assert subset_hash != scan_hash, "the imported manifest records its package, the scan its scan"
    assert subset_result == scan_result, "the same success step and trace digest"


@pytest.mark.timeout(1800)
def test_a_lerobot_act_on_robotwins_features_runs_an_episode_with_settings_derived(
    blocks: tuple[Path, Path], tmp_path: Path
) -> None:
    """A tiny random-weight ACT with RoboTwin's three cameras at 320x240, 14-D state and action,
    sealed by `scheduler run` from its config.json alone (`settings: {}`), served from
    .venv-lerobot: the episode runs to its step limit, every camera rendered for every chunk."""
    assert LEROBOT_PYTHON.is_file(), f"{LEROBOT_PYTHON} is not built (make lerobot-venv)"
    manifest, rows = blocks
    act = tmp_path / "act"
    _run(
        str(LEROBOT_PYTHON), "scripts/lerobot_tiny.py", "build", str(act), "--benchmark", "robotwin",
        "--size", "240x320", timeout=300,
    )  # fmt: skip
    checkpoint = {"path": str(act), "backend": "lerobot", "python": str(LEROBOT_PYTHON), "settings": {}}
    output, results = _fleet_run(manifest.parent.parent, "act", rows, checkpoint=checkpoint)
    assert results["overall"]["completed"] == 1, output[-3000:]
    identity = results["checkpoint_identity"]
    assert identity["backend"] == "lerobot"
    ((_, _), (success, steps, _)) = next(iter(_results(manifest.parent.parent / "runs" / "act").items()))
    limit = json.loads(manifest.read_text())["episodes"][0]["step_limit"]
    assert (success, steps) == (0, limit), "random weights do not stack blocks"
    sealed = json.loads((act / "evalfleet-checkpoint.json").read_text())
    cameras = {c["name"]: (c["height"], c["width"]) for c in sealed["settings"]["cameras"]}
    assert cameras == {"head_camera": (240, 320), "left_camera": (240, 320), "right_camera": (240, 320)}


STARVLA_REQUESTS = 3  # the upstream side's requests: its images after 0, 16 and 32 commands


def _records(path: Path) -> list[dict[str, Any]]:
    """What the StarVLA double received, one example per line (its --record)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("action_mode", ["abs", "rel"])
def test_starvlas_robotwin_recipe_sends_what_starvlas_client_sends_on_robotwins_own_loop(
    blocks: tuple[Path, Path], tmp_path: Path, action_mode: str
) -> None:
    """docs/remote.md's StarVLA RoboTwin recipe, served by evalfleet's `remote` backend to the double
    of StarVLA's server (its `hashed` model: any other image byte, prompt or state changes every
    action), runs stack_blocks_two's first episode through `scheduler run` to its step limit; then
    StarVLA's own client (restated) runs on RoboTwin's own script/eval_policy.py
    (robotwin_starvla_upstream.py) against the same double for its first requests (upstream's loop
    renders every camera after every action, 1.7 s each here). Asserted: the double received the
    same model inputs request by request: every image's bytes after the 224 x 224 resize, taken
    after the commands of the chunks before (so the commands RoboTwin executed were the same), the
    prompt and the unnorm key; `abs` sends float32 commands, which StarVLA passes to take_action as
    they are and evalfleet's episode as float64, `rel` float64 commands built on the real state."""
    manifest, rows = blocks
    folder = manifest.parent.parent
    settings = {**recipe("starvla_robotwin.yaml"), **robotwin_reply(action_mode)}
    chunk = settings["chunk_length"]
    record = tmp_path / "received.jsonl"
    argv = [sys.executable, str(STARVLA_DOUBLE), "--port", str(free_port()), "--embodiment", "robotwin"]
    argv += ["--chunk", str(chunk), "--action-dim", "14", "--model", "hashed", "--record", str(record)]
    with ServiceProcess(argv, tmp_path / "double.log").start() as double:
        url = f"ws://{double.address}"
        submission = f"starvla-{action_mode}"
        python = str(REPO / ".venv" / "bin" / "python")  # the remote backend's client libraries
        output, results = _fleet_run(
            folder, submission, rows, checkpoint={"remote": {**settings, "url": url}, "python": python}
        )
        assert results["overall"]["completed"] == 1, output[-3000:]
        sent_by_fleet = _records(record)
        upstream = tmp_path / "upstream.json"
        _run(
            str(PYTHON), str(STARVLA_UPSTREAM), str(ROOT), "stack_blocks_two", "clean-seen", url,
            settings["unnorm_key"], action_mode, str(STARVLA_REQUESTS * chunk), str(upstream), timeout=900,
        )  # fmt: skip
    ours = [r for r in sent_by_fleet if r["lang"] != "warm up"]  # the backend's load-time warm-up
    theirs = _records(record)[len(sent_by_fleet) :]
    limit = json.loads(manifest.read_text())["episodes"][0]["step_limit"]
    ((_, _), (success, steps, _)) = next(iter(_results(folder / "runs" / submission).items()))
    assert (success, steps) == (0, limit) and len(ours) == -(-limit // chunk), "a request per chunk to the limit"
    assert len(theirs) == STARVLA_REQUESTS and ours[:STARVLA_REQUESTS] == theirs, "the same model inputs"
    assert {tuple(image["shape"]) for r in theirs for image in r["images"]} == {(224, 224, 3)}
    assert len({image["sha256"] for r in theirs for image in r["images"]}) == 3 * STARVLA_REQUESTS, "the arms moved"
    reference = json.loads(upstream.read_text())
    assert reference["instruction"] == ours[0]["lang"] and len(reference["step_digests"]) == STARVLA_REQUESTS * chunk
