"""The evaluation spec (scheduler/spec.py): every key read, every mistake one line naming its key.

The parser is exercised in-process for each key and error; the command line (`scheduler run
--dry-run`, `scheduler submit --spec`) as a user runs it, against a real scheduler where one is
needed. `scheduler run` itself, with real LIBERO episodes, is tests/test_scheduler_run.py.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hub_cache import add_snapshot, offline_env
from procs import cli, one_line_refusal
from run_specs import write_spec

from benchmarks.robotwin.subset import import_subset
from benchmarks.synthetic.adapter import REFERENCE_POLICY_SETTINGS as SYNTHETIC_POLICY
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import spec, submission

pytestmark = pytest.mark.timeout(120)

MINIMAL = {
    "id": "eval-1",
    "checkpoint": {"path": "ckpt"},
    "benchmark": {"libero": {"suites": ["libero_object"]}},
}

# Every key with a value other than its default.
FULL: dict[str, Any] = {
    "version": 1,
    "id": "eval.full_2",
    "output": "out/eval",
    "checkpoint": {
        "path": "ckpt",
        "backend": "lerobot",
        "settings": {"noise_seed": 3, "cameras": [{"name": "agentview", "height": 64, "width": 64}]},
        "python": ".venv-lerobot/bin/python",
        "device": "cuda:1",
        "dtype": "bfloat16",
    },
    "benchmark": {
        "libero": {
            "suites": ["libero_object", "libero_goal"],
            "tasks": [0, 3, 5],
            "protocol": "openpi",
            "trials": 7,
            "seed": 11,
            "camera_size": 128,
            "max_steps": 90,
            "wait_steps": 4,
            "observation_digest": True,
            "perturbations": ["lan", "object"],
        }
    },
    "actions_per_chunk": 5,
    "batch_size": 2,
    "max_attempts": 4,
    "max_leased_tasks": 8,
    "priority": 30,
    "order": "given",
    "video": "all",
    "labels": {"run": "ablation-7", "who": "lab"},
    "canary": {"tasks": 6, "pause": True},
    "sequential": {"seed": 5, "threshold": 0.6, "precision": 0.05, "cancel_leased": True},
    "fleet": {
        "workers": 3,
        "gpus": ["GPU-aaaa", "GPU-bbbb"],
        "concurrency": 2,
        "worker_memory_gb": 3.5,
        "lease_seconds": 45,
        "stack": "mujoco-3.2.3_robosuite-1.4.1",
    },
}


def parse(document: dict[str, Any]) -> spec.Spec:
    return spec.parse(yaml.safe_dump(document), "eval.yaml")


def refusal(document: dict[str, Any] | str) -> spec.SpecError:
    text = document if isinstance(document, str) else yaml.safe_dump(document)
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(text, "eval.yaml")
    assert "\n" not in str(caught.value)
    return caught.value


def changed(path: str, value: Any, base: dict[str, Any] = MINIMAL) -> dict[str, Any]:
    """A deep copy of `base` with the dotted key set (None deletes it)."""
    document = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last)
    else:
        node[last] = value
    return document


def test_every_key_is_read_with_its_value() -> None:
    read = parse(FULL).model_dump(mode="json")
    expected = json.loads(json.dumps(FULL))
    expected["benchmark"]["libero"]["tasks"] = "0,3,5"  # a list of ids is the builder's "0,3,5"
    expected["fleet"]["lease_seconds"] = 45.0
    for section in ("checkpoint", "fleet", "canary", "sequential"):
        for key, value in expected[section].items():
            assert read[section][key] == value, (section, key)
    assert read["benchmark"]["libero"] == expected["benchmark"]["libero"]
    keys = ("version", "id", "output", "actions_per_chunk", "batch_size", "max_attempts", "max_leased_tasks")
    for key in (*keys, "priority", "order"):
        assert read[key] == expected[key], key
    assert read["video"] == "all" and read["labels"] == expected["labels"]


def test_the_sequential_section_is_the_submissions_sequential_settings() -> None:
    assert parse(MINIMAL).sequential is None and submission.sequential_settings(parse(MINIMAL)) is None
    single = submission.sequential_settings(parse(FULL))
    assert single == pb.SequentialSettings(seed=5, threshold=0.6, precision=0.05, cancel_leased=True)
    paired = submission.sequential_settings(parse(changed("sequential", {"paired_with": "eval-0", "margin": 0.05})))
    assert paired == pb.SequentialSettings(paired_with="eval-0", margin=0.05)
    assert not paired.HasField("threshold") and not paired.HasField("precision")


def test_defaults_fill_the_canonical_form_and_it_is_stable() -> None:
    minimal = parse(MINIMAL)
    canonical = json.loads(spec.canonical_json(minimal))
    assert canonical["batch_size"] == 5 and canonical["max_attempts"] == 3 and canonical["video"] == "failures"
    assert canonical["fleet"]["workers"] is None and canonical["actions_per_chunk"] is None
    assert canonical["benchmark"]["libero"]["protocol"] == "evalfleet"
    assert canonical["canary"] == {"tasks": 4, "pause": False}
    assert submission.canary_settings(parse(changed("canary", {"tasks": 0})).canary) is None
    # Key order and layout in the file do not matter; content does.
    reordered = yaml.safe_dump(dict(reversed(list(MINIMAL.items()))), default_flow_style=True)
    assert spec.canonical_json(spec.parse(reordered)) == spec.canonical_json(minimal)
    assert spec.canonical_json(parse(changed("batch_size", 2))) != spec.canonical_json(minimal)


def test_auto_is_the_unset_sizing() -> None:
    read = parse(changed("fleet", {"workers": "auto", "gpus": "auto"}))
    assert read.fleet.workers is None and read.fleet.gpus is None
    assert parse(changed("fleet", {"gpus": []})).fleet.gpus == []


@pytest.mark.parametrize(
    ("path", "value", "key", "words"),
    [
        ("colour", "red", "colour", "unknown key 'colour' (expected one of: version, id, output"),
        ("benchmark.libero.trails", 3, "benchmark.libero.trails", "unknown key 'trails' (expected one of: suites"),
        ("fleet.gpu", ["x"], "fleet.gpu", "unknown key 'gpu' (expected one of: workers, gpus"),
        ("checkpoint.weights", "x", "checkpoint.weights", "unknown key 'weights' (expected one of: path"),
        ("id", None, "id", "required"),
        ("id", "has space", "id", "must be 1-64 of A-Z a-z 0-9 . _ -"),
        ("id", "x" * 65, "id", "must be 1-64"),
        ("version", 2, "version", "must be 1, got 2"),
        ("benchmark.libero.trials", 0, "benchmark.libero.trials", "greater than or equal to 1, got 0"),
        ("benchmark.libero.trials", "2", "benchmark.libero.trials", "must be a valid integer, got '2'"),
        ("benchmark.libero.seed", -1, "benchmark.libero.seed", "greater than or equal to 0"),
        ("benchmark.libero.suites", [], "benchmark.libero.suites", "at least 1 item"),
        ("benchmark.libero.suites", ["libero_goal", "libero_goal"], "benchmark.libero.suites", "named twice"),
        ("benchmark.libero.tasks", ["0", 1], "benchmark.libero.tasks", "must hold integers"),
        ("benchmark.libero.observation_digest", "yes", "benchmark.libero.observation_digest", "valid boolean"),
        ("benchmark.libero.perturbations", ["lan", "bogus"], "benchmark.libero.perturbations", "axis 'bogus'; known"),
        ("benchmark.libero.perturbations", ["lan", "lan"], "benchmark.libero.perturbations", "an axis is named twice"),
        ("benchmark.libero.perturbations", "some", "benchmark.libero.perturbations", "valid list, got 'some'"),
        (
            "benchmark.robotwin",
            {"root": "r", "tasks": ["x"]},
            "benchmark",
            "give exactly one of libero, metaworld, robotwin",
        ),
        ("benchmark", {}, "benchmark", "give exactly one of libero, metaworld, robotwin, synthetic"),
        ("checkpoint", {"path": "a", "server": "h:1"}, "checkpoint", "exactly one of path, hub, remote or server"),
        ("checkpoint", {}, "checkpoint", "exactly one of path, hub, remote or server (got none)"),
        ("checkpoint", {"path": "a", "hub": "o/n"}, "checkpoint", "exactly one of path, hub, remote or server"),
        ("checkpoint", {"remote": {}, "backend": "x"}, "checkpoint", "backend and settings seal a checkpoint folder"),
        ("checkpoint", {"hub": "org/name"}, "checkpoint", "hub needs backend"),
        ("checkpoint", {"path": "a", "revision": "main"}, "checkpoint", "revision is a revision of hub"),
        ("checkpoint.hub", "no-org", "checkpoint.hub", "Hub repository id ORG/NAME, got 'no-org'"),
        ("checkpoint", {"path": "a", "settings": {}}, "checkpoint", "settings need the backend"),
        ("checkpoint", {"server": "h:1", "python": "p"}, "checkpoint", "python starts an inference server"),
        ("checkpoint.dtype", "f8", "checkpoint.dtype", "'float32', 'bfloat16' or 'float16', got 'f8'"),
        ("checkpoint.settings", [1], "checkpoint.settings", "valid dictionary"),
        ("actions_per_chunk", -1, "actions_per_chunk", "greater than or equal to 0"),
        ("batch_size", 0, "batch_size", "greater than or equal to 1"),
        ("max_leased_tasks", 0, "max_leased_tasks", "greater than or equal to 1"),
        ("max_attempts", 1.5, "max_attempts", "valid integer"),
        ("priority", "high", "priority", "valid integer"),
        ("priority", -1, "priority", "greater than or equal to 0"),
        ("batch_size", 100_001, "batch_size", "less than or equal to 100000"),
        ("order", "shortest-first", "order", "'longest-first' or 'given'"),
        ("video", "some", "video", "'none', 'failures' or 'all'"),
        ("labels", {"n": 1}, "labels.n", "valid string, got 1"),
        ("canary.tasks", -1, "canary.tasks", "greater than or equal to 0"),
        ("canary.pause", "yes", "canary.pause", "valid boolean"),
        ("canary.episodes", 3, "canary.episodes", "unknown key 'episodes' (expected one of: tasks, pause)"),
        ("sequential.seed", -1, "sequential.seed", "greater than or equal to 0"),
        ("sequential.threshold", 1.0, "sequential.threshold", "less than 1"),
        ("sequential.precision", 0.5, "sequential.precision", "less than 0.5"),
        ("sequential.margin", 0, "sequential.margin", "greater than 0"),
        ("sequential.paired_with", "a b", "sequential.paired_with", "must be 1-64 of A-Z"),
        ("sequential", {"margin": 0.05}, "sequential", "margin is the equivalence margin of a paired evaluation"),
        ("sequential", {"paired_with": "a", "threshold": 0.5}, "sequential", "stops on the comparison"),
        ("fleet.workers", 0, "fleet.workers", "greater than or equal to 1"),
        ("fleet.workers", "many", "fleet.workers", "valid integer, got 'many'"),
        ("fleet.gpus", "GPU-1", "fleet.gpus", "valid list"),
        ("fleet.concurrency", 0, "fleet.concurrency", "greater than or equal to 1"),
        ("fleet.lease_seconds", 0, "fleet.lease_seconds", "greater than 0"),
        ("fleet.lease_seconds", True, "fleet.lease_seconds", "valid number, got True"),
        ("fleet.worker_memory_gb", -1, "fleet.worker_memory_gb", "greater than 0"),
    ],
)
def test_each_mistake_is_one_line_naming_its_key(path: str, value: Any, key: str, words: str) -> None:
    error = refusal(changed(path, value))
    assert error.key == key, error
    assert words in error.message, error
    assert str(error).startswith(f"eval.yaml: {key}: ")


def test_robotwin_and_synthetic_sections() -> None:
    robotwin = {"root": "RoboTwin", "tasks": ["beat_block_hammer"], "episodes": 10}
    read = parse(changed("benchmark", {"robotwin": robotwin}))
    assert read.benchmark.route == "robotwin" and read.benchmark.robotwin is not None
    assert read.benchmark.robotwin.settings == ["clean-seen", "randomized-unseen"]
    bad_setting = refusal(changed("benchmark", {"robotwin": {**robotwin, "settings": ["dirty"]}}))
    assert bad_setting.key == "benchmark.robotwin.settings" and "unknown setting 'dirty'" in bad_setting.message
    both = refusal(changed("benchmark", {"robotwin": {**robotwin, "subset": "s"}}))
    assert both.key == "benchmark.robotwin" and "not both" in both.message
    neither = refusal(changed("benchmark", {"robotwin": {"root": "RoboTwin"}}))
    assert "give root and tasks" in neither.message
    assert read.benchmark.robotwin.scan_jobs == 1
    jobs = refusal(changed("benchmark", {"robotwin": {**robotwin, "scan_jobs": 0}}))
    assert jobs.key == "benchmark.robotwin.scan_jobs"
    synthetic = parse(changed("benchmark", {"synthetic": {"episodes": 6, "success_rate": 0.25}}))
    assert synthetic.benchmark.route == "synthetic"
    rate = refusal(changed("benchmark", {"synthetic": {"episodes": 6, "success_rate": 2}}))
    assert rate.key == "benchmark.synthetic.success_rate"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("id: a\nid: b\ncheckpoint: {path: c}\n", "key 'id' is given twice"),
        ("id: [\n", "not valid YAML: line 2"),
        ("- a\n- b\n", "must be a mapping of keys"),
        ("", "must be a mapping of keys"),
        ("id: !!python/object:os.system x\n", "not valid YAML"),
    ],
)
def test_yaml_mistakes_are_one_line(text: str, words: str) -> None:
    assert words in str(refusal(text))


def test_run_refuses_a_bad_spec_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    output = tmp_path / "out"
    bad = write_spec(tmp_path, changed("output", str(output), changed("benchmark.libero.trails", 2)))
    stderr = one_line_refusal(cli("run", str(bad)))
    assert stderr == f"scheduler: {bad}: benchmark.libero.trails: unknown key 'trails' (expected one of: suites, " + (
        "tasks, protocol, trials, seed, camera_size, max_steps, wait_steps, observation_digest, perturbations)\n"
    )
    missing = one_line_refusal(cli("run", str(tmp_path / "absent.yaml")))
    assert "absent.yaml: cannot read: No such file or directory" in missing
    unsealed = write_spec(tmp_path, changed("output", str(output), changed("checkpoint.path", "no-such-folder")))
    assert "checkpoint.path: " in one_line_refusal(cli("run", str(unsealed), "--dry-run"))
    (tmp_path / "ckpt").mkdir()
    paired = write_spec(tmp_path, changed("output", str(output), changed("sequential", {"paired_with": "eval-0"})))
    assert "sequential.paired_with: a run's scheduler holds its own submission only" in one_line_refusal(
        cli("run", str(paired), "--dry-run")
    )
    assert not output.exists()


def test_builder_mistakes_are_refused_before_anything_starts_naming_the_spec_key(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    output = tmp_path / "out"
    for key, value, words in (
        ("benchmark.libero.tasks", "0-99", "task ids must lie within 0-9"),
        ("benchmark.libero.suites", ["libero_object", "libero_100"], "unknown LIBERO suite 'libero_100'"),
        ("benchmark.libero.protocol", "harness-x", "unknown protocol preset 'harness-x'"),
    ):
        path = write_spec(tmp_path, changed("output", str(output), changed(key, value)))
        stderr = one_line_refusal(cli("run", str(path), "--dry-run"))
        assert f": {key}: " in stderr and words in stderr, stderr
    assert not output.exists()


def test_perturbations_plan_each_suites_perturbed_suites_and_refuse_a_suite_without_them(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    output = tmp_path / "out"
    document = changed("output", str(output))
    document["benchmark"]["libero"].update(suites=["libero_object"], tasks="0", trials=2, perturbations=["lan", "swap"])
    plan = cli("run", str(write_spec(tmp_path, document)), "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "6 episodes" in plan.stdout, plan.stdout  # libero_object, libero_object_lan, libero_object_swap
    document["benchmark"]["libero"].update(suites=["libero_90"])
    stderr = one_line_refusal(cli("run", str(write_spec(tmp_path, document)), "--dry-run"))
    assert "benchmark.libero: " in stderr and "and libero_90 is not one" in stderr, stderr
    assert not output.exists()


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    output = tmp_path / "out"
    gpus = {"gpus": ["GPU-11111111-aaaa", "GPU-22222222-bbbb"], "concurrency": 2}
    document = changed("fleet", gpus, changed("output", str(output)))
    document["benchmark"]["libero"].update(tasks="0-2", trials=4, protocol="openpi")
    run = cli("run", str(write_spec(tmp_path, document)), "--dry-run")
    assert run.returncode == 0, run.stderr
    plan = run.stdout
    assert "12 episodes" in plan and "(to build)" in plan, plan
    assert "2 (one per GPU (2 found))" in plan and "2 episode(s) each" in plan, plan
    for worker, uuid in enumerate(gpus["gpus"]):
        assert f"eval-1-worker-{worker}" in plan and f"GPU {uuid}" in plan
    assert f"inference-server for {tmp_path / 'ckpt'}" in plan
    assert not output.exists(), "a dry run writes nothing"
    cpu = cli("run", str(write_spec(tmp_path, changed("fleet", {"gpus": []}, document))), "--dry-run")
    assert "CPU rendering:" in cpu.stdout and "CPU (OSMesa)" in cpu.stdout, cpu.stdout


def test_submit_spec_pins_the_sealed_checkpoint_stores_the_spec_and_is_idempotent(
    tmp_path: Path, scheduler: Any, checkpoint_root: Path
) -> None:
    document = {
        "id": "spec-sub",
        "output": str(tmp_path / "out"),
        "checkpoint": {"path": str(checkpoint_root / "syn")},
        "benchmark": {"synthetic": {"episodes": 6, "seed": 3}},
        "batch_size": 2,
        "actions_per_chunk": 2,
        "labels": {"purpose": "test"},
    }
    path = write_spec(tmp_path, document)
    first = cli("submit", "--spec", str(path), "--server", scheduler.address)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "spec-sub\n" and "3 tasks (3 new), 6 episodes" in first.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "inference_server.cli", "checkpoint", "show", str(checkpoint_root / "syn"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    digest = json.loads(shown.stdout)["digest"]
    status = json.loads(cli("--server", scheduler.address, "status", "spec-sub", "--json").stdout)
    (submission,) = status["submissions"]
    assert submission["checkpoint"] == digest
    assert json.loads(submission["spec_json"]) == json.loads(spec.canonical_json(spec.load(path).spec))
    table = cli("status", "spec-sub", "--server", scheduler.address).stdout
    assert f"spec of spec-sub: {spec.canonical_json(spec.load(path).spec)}" in table
    again = cli("submit", "--spec", str(path), "--server", scheduler.address)
    assert again.returncode == 0 and "3 tasks (0 new)" in again.stderr, again.stderr
    with sqlite3.connect(scheduler.db) as conn:
        (execute_steps,) = conn.execute("SELECT execute_steps FROM submissions WHERE id = 'spec-sub'").fetchone()
    assert execute_steps == 2
    edited = write_spec(tmp_path, {**document, "batch_size": 3})
    assert "exists with a different batch_size" in one_line_refusal(
        cli("submit", "--spec", str(edited), "--server", scheduler.address)
    )
    mixed = one_line_refusal(cli("submit", "--spec", str(path), "--route", "x", "--server", scheduler.address))
    assert "--route cannot be given with it" in mixed


def test_connection_options_work_before_and_after_the_subcommand(scheduler: Any) -> None:
    before = cli("--server", scheduler.address, "status", "--json")
    after = cli("status", "--json", "--server", scheduler.address)
    assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
    assert json.loads(before.stdout) == json.loads(after.stdout)
    # Given twice, the subcommand's wins.
    assert cli("--server", "127.0.0.1:1", "status", "--server", scheduler.address).returncode == 0
    assert "--server does not apply to `scheduler manifest`" in one_line_refusal(
        cli("--server", scheduler.address, "manifest", "show", "x.json")
    )


def test_run_with_a_timeout_stops_everything_it_started_and_says_how_to_resume(
    tmp_path: Path, checkpoint_root: Path
) -> None:
    """`scheduler run --timeout` on synthetic episodes (no simulator) that outlast it: exit 130, the
    fleet stopped and forgotten, the submission kept for the next run; `--dashboard` prints its URL."""
    output = tmp_path / "out"
    document = {
        "id": "timed",
        "output": str(output),
        "checkpoint": {"path": str(checkpoint_root / "syn")},
        "benchmark": {"synthetic": {"episodes": 4, "mean_seconds": 120.0}},
        "batch_size": 1,
        "canary": {"tasks": 0},
        "fleet": {"workers": 1},
    }
    run = cli("run", str(write_spec(tmp_path, document)), "--timeout", "15", "--dashboard", timeout=120)
    assert run.returncode == 130, run.stderr
    assert "dashboard at http://127.0.0.1:" in run.stderr
    assert "interrupted; every process it started is stopped" in run.stderr
    assert not (output / "fleet.json").exists()
    with sqlite3.connect(output / "scheduler.sqlite") as conn:
        (tasks,) = conn.execute("SELECT COUNT(*) FROM tasks WHERE submission_id = 'timed'").fetchone()
    assert tasks == 4
    bad = cli("run", str(write_spec(tmp_path, document)), "--timeout", "0")
    assert "--timeout 0.0 must be > 0" in one_line_refusal(bad)


def test_a_run_that_its_sequential_rule_stops_is_done_and_says_so(tmp_path: Path, checkpoint_root: Path) -> None:
    """`scheduler run` of a sequential spec on synthetic episodes that all succeed: the threshold is
    decided long before the 60 episodes, the rest cancelled, exit 0, RESULTS.json without Wilson
    bounds and with the verdict."""
    output = tmp_path / "out"
    document = {
        "id": "decided",
        "output": str(output),
        "checkpoint": {"path": str(checkpoint_root / "syn")},
        "benchmark": {"synthetic": {"episodes": 60, "mean_seconds": 0.05, "success_rate": 1.0}},
        "batch_size": 1,
        "max_leased_tasks": 1,
        "canary": {"tasks": 0},
        "sequential": {"seed": 3, "threshold": 0.5},
        "fleet": {"workers": 1},
    }
    run = cli("run", str(write_spec(tmp_path, document)), timeout=240)
    assert run.returncode == 0, run.stderr
    assert "stopped by its sequential rule: rate at least 50.0%" in run.stderr, run.stderr
    results = json.loads((output / "RESULTS.json").read_text())
    assert results["sequential"]["verdict"] == "at_least" and results["overall"]["success_rate_low"] is None
    assert results["overall"]["completed"] < 60 and results["sequential"]["cancelled_tasks"] > 0


def test_a_spec_imports_a_robotwin_subset_where_it_is_submitted(
    tmp_path: Path, scheduler: Any, checkpoint_root: Path
) -> None:
    """`submit --spec` of a spec naming a RoboTwin subset package (the checksummed double): its
    manifests are the importer's, verified on every submit; a tampered package is one line naming
    the key, and nothing is submitted."""
    package = tmp_path / "subset"
    shutil.copytree(Path(__file__).parent / "doubles" / "robotwin_subset", package)
    document = {
        "id": "subset-eval",
        "output": str(tmp_path / "out"),
        "checkpoint": {"path": str(checkpoint_root / "syn")},
        "benchmark": {"robotwin": {"subset": str(package)}},
        "batch_size": 2,
    }
    path = write_spec(tmp_path, document)
    submitted = cli("submit", "--spec", str(path), "--server", scheduler.address)
    assert submitted.returncode == 0, submitted.stderr
    imported = import_subset(package)
    status = json.loads(cli("--server", scheduler.address, "status", "subset-eval", "--json").stdout)
    assert status["episodes_planned"] == sum(len(m.episodes) for m in imported)
    summary = json.loads(cli("--server", scheduler.address, "summary", "subset-eval", "--json").stdout)
    assert sorted(m["manifest_hash"] for m in summary["manifests"]) == sorted(m.hash for m in imported)

    episodes = package / "episodes.jsonl"
    episodes.write_text(episodes.read_text().replace('"seed": ', '"seed": 1', 1))
    refused = one_line_refusal(cli("submit", "--spec", str(path), "--server", scheduler.address))
    assert "benchmark.robotwin.subset: episodes.jsonl: sha256 is" in refused, refused
    assert [
        s["submission_id"]
        for s in json.loads(cli("--server", scheduler.address, "status", "--json").stdout)["submissions"]
    ] == ["subset-eval"]


HUB_REPO = "evalfleet-test/tiny-policy"
HUB_SETTINGS = {
    "cameras": [{"name": "head", "height": 8, "width": 8}],
    "state": [{"name": "qpos", "length": 2}],
    "action_dim": 2,
    "chunk_length": 4,
}


def test_submit_spec_seals_a_hub_checkpoint_from_the_cache_and_pins_its_commit(
    tmp_path: Path, scheduler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, from a Hub cache laid out by hand: the files are linked into the run's folder and
    sealed there with the commit, which the pinned identity carries; a repository the cache lacks
    is one line naming the command that fetches it."""
    home = tmp_path / "hf"
    for key, value in offline_env(home).items():
        monkeypatch.setenv(key, value)
    commit = add_snapshot(home, HUB_REPO, {"model.safetensors": b"weights" * 10})
    cache = sorted((p.relative_to(home), p.is_symlink()) for p in home.rglob("*"))
    checkpoint = {"hub": HUB_REPO, "backend": "deterministic", "settings": HUB_SETTINGS}
    document = {
        "id": "hub-sub",
        "output": str(tmp_path / "out"),
        "checkpoint": checkpoint,
        "benchmark": {"synthetic": {"episodes": 2, "seed": 3}},
    }
    submitted = cli("submit", "--spec", str(write_spec(tmp_path, document)), "--server", scheduler.address)
    assert submitted.returncode == 0, submitted.stderr
    folder = tmp_path / "out" / "checkpoints" / HUB_REPO.replace("/", "--")
    shown = subprocess.run(
        [sys.executable, "-m", "inference_server.cli", "checkpoint", "show", str(folder), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    described = json.loads(shown.stdout)
    assert described["identity"]["hub"] == {"repo_id": HUB_REPO, "revision": "main", "commit": commit}
    (submission,) = json.loads(cli("--server", scheduler.address, "status", "hub-sub", "--json").stdout)["submissions"]
    assert submission["checkpoint"] == described["digest"]
    assert sorted((p.relative_to(home), p.is_symlink()) for p in home.rglob("*")) == cache, "the cache is unchanged"

    missing = {**document, "id": "hub-missing", "output": str(tmp_path / "out2")}
    missing["checkpoint"] = {**checkpoint, "hub": "evalfleet-test/absent", "revision": "v2"}
    line = one_line_refusal(cli("submit", "--spec", str(write_spec(tmp_path, missing)), "--server", scheduler.address))
    assert ": checkpoint.hub: " in line and "`hf download evalfleet-test/absent --revision v2`" in line, line
    assert not (tmp_path / "out2" / "checkpoints" / "evalfleet-test--absent").exists()


def test_run_serves_a_hub_checkpoint_and_its_results_record_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scheduler run` of a spec naming a Hub repository, offline from a cache laid out by hand:
    the inference server serves the run's folder, and RESULTS.json's identity holds the commit."""
    home = tmp_path / "hf"
    for key, value in offline_env(home).items():
        monkeypatch.setenv(key, value)
    commit = add_snapshot(home, HUB_REPO, {"model.safetensors": b"weights" * 10})
    output = tmp_path / "out"
    document = {
        "id": "hub-run",
        "output": str(output),
        "checkpoint": {"hub": HUB_REPO, "revision": commit, "backend": "deterministic", "settings": SYNTHETIC_POLICY},
        "benchmark": {"synthetic": {"episodes": 2, "mean_seconds": 0.05}},
        "canary": {"tasks": 0},
        "video": "none",
        "fleet": {"workers": 1},
    }
    run = cli("run", str(write_spec(tmp_path, document)), timeout=240)
    assert run.returncode == 0, run.stderr
    identity = json.loads((output / "RESULTS.json").read_text())["checkpoint_identity"]
    assert identity["hub"] == {"repoId": HUB_REPO, "revision": commit, "commit": commit}
    assert identity["epoch"] == HUB_REPO.replace("/", "--")
