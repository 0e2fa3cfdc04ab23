"""Fuzzing at volume: 100,000 generated inputs per RPC of both services, and per parser.

CI fuzzes each target a few hundred times (`tests/test_fuzz_*.py`); this script runs the same
strategies and properties (`scripts.fuzz.strategies`, `scripts.fuzz.targets`) at volume, outside CI, against
real processes over real gRPC: one `scheduler serve` on a real SQLite database, seeded with a
submission, a lease and a result, and one `inference-server` serving a sealed reference checkpoint.
The targets are every method of `evalfleet.v1.Scheduler` and `evalfleet.v1.Policy` (read from the
descriptors, so a new RPC is fuzzed without a change here), manifest parsing
(`manifests.format.parse`) and checkpoint parsing (what `inference-server` does with a folder
before it opens a port: verify it and build its backend).

What each input must do:
- RPCs: end with an allowed status code (never UNKNOWN or INTERNAL, an unhandled exception; never
  DEADLINE_EXCEEDED or UNAVAILABLE, a hang or a crash), also in a policy session's in-band
  errors; the server process stays up.
- A refusal changes nothing. Scheduler: no commit to the database (SQLite's `PRAGMA
  data_version`, read on a connection of the script's own, moves on any commit by another
  connection) and no file added to or removed from the artifact store. Requests run concurrently
  in batches; when a batch with refusals in it moved data_version (an accepted request wrote), its
  refused requests are sent again one at a time, each between two reads of data_version. Policy:
  a batch of sessions leaves at most as many more sessions on the server as it had sessions
  opened.
- Parsers: a result, or their typed refusal (ManifestError; CheckpointError or BackendError);
  nothing else escapes.

Inputs come from hypothesis, seeded: each target runs in chunks of --chunk inputs, chunk j drawn
with seed SEED+j, round-robin over the targets so that a run cut short has covered every target
alike. A failure prints the command that draws the same inputs again, `--rpc NAME --seed S
--count N` (the server state they meet may differ: other targets ran before them), and is written,
with the input's bytes, to failures.jsonl in --out-dir.

    nice -n 10 python -m scripts.fuzz.long --count 100000 --seed 1
    python -m scripts.fuzz.long --rpc Submit --seed 7 --count 250    # replay
    python -m scripts.fuzz.long --list
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from benchmarks.synthetic.adapter import REFERENCE_POLICY_SETTINGS
from evalfleet.local_fleet import policy_argv, scheduler_argv, wait_serving
from evalfleet.processes import ServiceProcess
from evalfleet.v1 import policy_pb2, scheduler_pb2
from inference_server.checkpoint import seal
from scripts.common.signals import set_on
from scripts.fuzz.strategies import ALLOWED_CODES, messages
from scripts.fuzz.targets import (
    SCHEDULER_KNOWN,
    check_checkpoint_case,
    checkpoint_cases,
    manifest_bodies,
    opening_frame,
    parses_or_refuses,
    refused_in_band,
    seed_scheduler,
    session_streams,
)

SCHEDULER = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"]
POLICY = policy_pb2.DESCRIPTOR.services_by_name["Policy"]
PARSERS = ("manifest", "checkpoint")
CALL_TIMEOUT_S = 30.0
MAX_INPUT_BYTES_KEPT = 65_536  # of a failing input, in failures.jsonl
# Set by SIGTERM (kill, a job scheduler): the run ends like Ctrl-C, the servers stop, the counts are written.
STOP = threading.Event()


def all_targets() -> list[str]:
    return [
        *(f"{SCHEDULER.name}.{m}" for m in SCHEDULER.methods_by_name),
        *(f"{POLICY.name}.{m}" for m in POLICY.methods_by_name),
        *PARSERS,
    ]


def resolve_targets(names: list[str] | None) -> list[str]:
    """`--rpc` values: a full name (`Scheduler.Submit`), a bare method name or a parser; none: all."""
    known = all_targets()
    if not names:
        return known
    chosen: list[str] = []
    for name in names:
        matches = [t for t in known if t == name or t.split(".")[-1] == name]
        if len(matches) != 1:
            raise SystemExit(f"fuzz_long: --rpc {name!r} names none of {', '.join(known)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


# Outcomes ----------------------------------------------------------------------------------------


@dataclass
class Failure:
    """One input that broke a property, with what replays it."""

    target: str
    kind: str  # "code", "in-band", "state-change", "crash", "exception"
    detail: str
    seed: int
    index: int  # within the chunk drawn with `seed`
    frames: list[bytes] = field(default_factory=list)

    def replay(self) -> str:
        name = self.target.split(".")[-1]
        return f"python -m scripts.fuzz.long --rpc {name} --seed {self.seed} --count {self.index + 1}"

    def record(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "detail": self.detail[:4000],
            "seed": self.seed,
            "index": self.index,
            "replay": self.replay(),
            "frames_hex": [frame[:MAX_INPUT_BYTES_KEPT].hex() for frame in self.frames],
        }


@dataclass
class Tally:
    """Per target: inputs run, outcomes by status code (or parser result), failures, time spent."""

    inputs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: int = 0
    rechecked: int = 0
    seconds: float = 0.0


class Report:
    """The running totals, the failure log and the progress line."""

    def __init__(self, out_dir: Path, targets: list[str], count: int, seed: int) -> None:
        self.out_dir = out_dir
        self.tallies = {t: Tally() for t in targets}
        self.count = count
        self.seed = seed
        self.started = time.monotonic()
        self.failures_path = out_dir / "failures.jsonl"
        self.failures: list[Failure] = []
        self.last_progress = 0.0
        self.lock = threading.Lock()

    def fail(self, failure: Failure) -> None:
        with self.lock:
            self.failures.append(failure)
            self.tallies[failure.target].failures += 1
            with self.failures_path.open("a") as stream:
                stream.write(json.dumps(failure.record()) + "\n")
        print(f"FAILURE {failure.target} [{failure.kind}] {failure.detail[:500]}", flush=True)
        print(f"  replay: {failure.replay()}", flush=True)

    def progress(self, target: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_progress < 10.0:
            return
        self.last_progress = now
        done = sum(t.inputs for t in self.tallies.values())
        total = self.count * len(self.tallies)
        elapsed = now - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("inf")
        tally = self.tallies[target]
        print(
            f"[{elapsed:7.0f}s] {target}: {tally.inputs}/{self.count}  all: {done}/{total} "
            f"({rate:.0f} inputs/s, ETA {eta / 60:.1f} min)  failures: {len(self.failures)}",
            flush=True,
        )

    def write(self, finished: bool) -> dict[str, Any]:
        summary = {
            "seed": self.seed,
            "count_per_target": self.count,
            "finished": finished,
            "wall_seconds": round(time.monotonic() - self.started, 1),
            "failures": len(self.failures),
            "targets": {
                name: {
                    "inputs": t.inputs,
                    "outcomes": dict(sorted(t.outcomes.items())),
                    "failures": t.failures,
                    "refusals_rechecked_alone": t.rechecked,
                    "seconds": round(t.seconds, 1),
                }
                for name, t in self.tallies.items()
            },
        }
        (self.out_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary


# Calling a method with raw frames ----------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    code: grpc.StatusCode
    details: str
    responses: list[bytes]


def caller(channel: grpc.Channel, service: Any, method: str) -> Callable[[list[bytes]], Outcome]:
    """Calls `method` with serialized request frames (one unless the client streams), whatever its
    cardinality, and collects the serialized responses; every call has a deadline."""
    descriptor = service.methods_by_name[method]
    path = f"/{service.full_name}/{method}"
    streams_in, streams_out = descriptor.client_streaming, descriptor.server_streaming
    if streams_in and streams_out:
        rpc: Any = channel.stream_stream(path)
    elif streams_in:
        rpc = channel.stream_unary(path)
    elif streams_out:
        rpc = channel.unary_stream(path)
    else:
        rpc = channel.unary_unary(path)

    def call(frames: list[bytes]) -> Outcome:
        request: Any = iter(frames) if streams_in else frames[0]
        responses: list[bytes] = []  # kept up to an error: a session may open, then be refused
        try:
            answer = rpc(request, timeout=CALL_TIMEOUT_S)
            if streams_out:
                for response in answer:
                    responses.append(response)
            else:
                responses.append(answer)
        except grpc.RpcError as error:
            return Outcome(error.code(), error.details() or "", responses)
        return Outcome(grpc.StatusCode.OK, "", responses)

    return call


# Servers -----------------------------------------------------------------------------------------


class _Served:
    """A server process started from ``argv`` (log in ``log``) and the client channel to it; killed
    and started again on the same arguments after a crash."""

    argv: list[str]
    log: Path
    proc: ServiceProcess
    channel: grpc.Channel

    def _start(self) -> ServiceProcess:
        proc = ServiceProcess(self.argv, self.log)
        proc.start()
        wait_serving(proc.address)
        return proc

    def restart(self) -> None:
        self.channel.close()
        self.proc.kill()
        self.proc = self._start()
        self.channel = grpc.insecure_channel(self.proc.address)


class Scheduler(_Served):
    """A real scheduler on a real SQLite file, seeded; restarted on the same file after a crash."""

    def __init__(self, work: Path) -> None:
        self.db = work / "scheduler.sqlite"
        self.artifacts = Path(f"{self.db}.artifacts")
        self.log = work / "scheduler.log"
        # Leases outlive the run, so the reaper never writes while refusals are checked.
        self.argv = scheduler_argv(self.db, "--lease-seconds", "1000000")
        self.proc = self._start()
        seed_scheduler(self.proc.address)
        self.channel = grpc.insecure_channel(self.proc.address)
        self.version = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, check_same_thread=False)
        self.callers: dict[str, Callable[[list[bytes]], Outcome]] = {}

    def restart(self) -> None:
        super().restart()
        self.callers.clear()

    def call(self, method: str) -> Callable[[list[bytes]], Outcome]:
        if method not in self.callers:
            self.callers[method] = caller(self.channel, SCHEDULER, method)
        return self.callers[method]

    def state(self) -> tuple[int, tuple[str, ...]]:
        """What a refusal must not change: the database's commit counter (as this connection sees
        it) and the files of the artifact store."""
        (data_version,) = self.version.execute("PRAGMA data_version").fetchone()
        files = tuple(sorted(str(p.relative_to(self.artifacts)) for p in self.artifacts.rglob("*")))
        return data_version, files if self.artifacts.exists() else ()

    def check_detector(self) -> None:
        """The change detector sees an accepted write, or every 'no state change' verdict is void."""
        before = self.state()
        register = self.call("RegisterWorker")
        outcome = register([scheduler_pb2.RegisterWorkerRequest(worker_id="fuzz-probe").SerializeToString()])
        if outcome.code != grpc.StatusCode.OK or self.state() == before:
            raise SystemExit(f"fuzz_long: the database change detector missed a write ({outcome.code.name})")

    def close(self) -> None:
        self.version.close()
        self.channel.close()
        self.proc.stop()


class Policy(_Served):
    """A real inference server serving a sealed reference checkpoint (`deterministic`)."""

    def __init__(self, work: Path) -> None:
        root = work / "checkpoints"
        (root / "syn").mkdir(parents=True)
        seal(root / "syn", "deterministic", dict(REFERENCE_POLICY_SETTINGS))
        # Room for every detached session an accepted open leaves, evicted after a minute idle.
        self.argv = policy_argv("syn", root, "--max-sessions", "200000", "--session-idle-seconds", "60")
        self.log = work / "policy.log"
        self.proc = self._start()
        self.channel = grpc.insecure_channel(self.proc.address)
        self.digest = self.identity().digest

    def identity(self) -> policy_pb2.GetIdentityResponse:
        rpc: grpc.UnaryUnaryMultiCallable[policy_pb2.GetIdentityRequest, policy_pb2.GetIdentityResponse]
        rpc = self.channel.unary_unary(
            f"/{POLICY.full_name}/GetIdentity",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=policy_pb2.GetIdentityResponse.FromString,
        )
        response: policy_pb2.GetIdentityResponse = rpc(policy_pb2.GetIdentityRequest(), timeout=CALL_TIMEOUT_S)
        return response

    def close(self) -> None:
        self.channel.close()
        self.proc.stop()


# Inputs ------------------------------------------------------------------------------------------


def request_frames(descriptor: Any, streams_in: bool, known: dict[str, list[Any]]) -> st.SearchStrategy[list[bytes]]:
    """A hostile message (three in four) or arbitrary bytes; one to four frames when the client streams."""
    message = messages(descriptor, known).map(lambda m: m.SerializeToString())
    frame = st.one_of(message, message, message, st.binary(max_size=300))
    return st.lists(frame, min_size=1, max_size=4) if streams_in else frame.map(lambda f: [f])


def session_frames(digest: str) -> st.SearchStrategy[list[bytes]]:
    """A session stream as CI fuzzes it (three in four), or an open followed by arbitrary bytes."""
    streams = session_streams(digest).map(lambda requests: [r.SerializeToString() for r in requests])
    raw = st.tuples(st.booleans(), st.lists(st.binary(max_size=300), min_size=1, max_size=4)).map(
        lambda parts: [opening_frame(digest)] * parts[0] + parts[1]
    )
    return st.one_of(streams, streams, streams, raw)


def draw(strategy: st.SearchStrategy[Any], seed: int, count: int, sink: Callable[[Any], None]) -> None:
    """Feeds `count` inputs drawn from `strategy` with hypothesis seeded by `seed` to `sink`.

    Only the generate phase runs: the sink records failures rather than raising, so hypothesis
    never shrinks, and the same seed and count draw the same inputs."""

    @hypothesis_seed(seed)
    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run(value: Any) -> None:
        if STOP.is_set():
            raise KeyboardInterrupt  # hypothesis lets it through, where it would replay any other exception
        sink(value)

    run()


# Running one chunk of one target -----------------------------------------------------------------


class Runner:
    """Runs chunks of inputs against the targets, in concurrent batches for the RPCs."""

    def __init__(self, args: argparse.Namespace, report: Report, work: Path) -> None:
        self.args = args
        self.report = report
        self.work = work
        self.pool = ThreadPoolExecutor(max_workers=args.concurrency)
        targets = report.tallies
        self.scheduler = Scheduler(work) if any(t.startswith(f"{SCHEDULER.name}.") for t in targets) else None
        self.policy = Policy(work) if any(t.startswith(f"{POLICY.name}.") for t in targets) else None
        if self.scheduler is not None:
            self.scheduler.check_detector()

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for server in (self.scheduler, self.policy):
            if server is not None:
                server.close()

    def chunk(self, target: str, seed: int, count: int) -> None:
        started = time.monotonic()
        if target == "manifest":
            self._local(target, manifest_bodies(), seed, count, self._manifest)
        elif target == "checkpoint":
            self._local(target, checkpoint_cases(), seed, count, self._checkpoint)
        elif target.startswith(f"{SCHEDULER.name}."):
            self._scheduler(target, seed, count)
        else:
            self._policy(target, seed, count)
        self.report.tallies[target].seconds += time.monotonic() - started
        self.report.progress(target, force=True)

    # Parsers, in this process.

    def _manifest(self, body: bytes) -> tuple[str, list[bytes]]:
        return parses_or_refuses(body), [body]

    def _checkpoint(self, case: Any) -> tuple[str, list[bytes]]:
        frames = [case.manifest if isinstance(case.manifest, bytes) else json.dumps(case.manifest).encode()]
        frames += [case.index] if case.index is not None else []
        return check_checkpoint_case(self.work, case), frames

    def _local(
        self,
        target: str,
        strategy: st.SearchStrategy[Any],
        seed: int,
        count: int,
        check: Callable[[Any], tuple[str, list[bytes]]],
    ) -> None:
        tally = self.report.tallies[target]
        index = 0

        def sink(value: Any) -> None:
            nonlocal index
            try:
                outcome, _ = check(value)
            except Exception as exc:  # the property's point: nothing but the typed refusal escapes
                outcome = type(exc).__name__
                self.report.fail(Failure(target, "exception", f"{outcome}: {exc}", seed, index, _frames(value)))
            tally.inputs += 1
            tally.outcomes[outcome] += 1
            index += 1
            self.report.progress(target)

        draw(strategy, seed, count, sink)

    # RPCs, in concurrent batches.

    def _batched(
        self,
        target: str,
        strategy: st.SearchStrategy[list[bytes]],
        seed: int,
        count: int,
        call: Callable[[list[bytes]], Outcome],
        settle: Callable[[list[tuple[int, list[bytes], Outcome]], Any], None],
        begin: Callable[[], Any],
    ) -> None:
        tally = self.report.tallies[target]
        batch: list[tuple[int, list[bytes], Future[Outcome]]] = []
        index = 0
        context: Any = None

        def finish() -> None:
            nonlocal batch
            done = [(i, frames, future.result()) for i, frames, future in batch]
            batch = []
            for i, frames, outcome in done:
                tally.inputs += 1
                tally.outcomes[outcome.code.name] += 1
                if outcome.code not in ALLOWED_CODES:
                    detail = f"{outcome.code.name}: {outcome.details}"
                    self.report.fail(Failure(target, "code", detail, seed, i, frames))
            settle(done, context)
            self.report.progress(target)

        def sink(frames: list[bytes]) -> None:
            nonlocal index, context
            if not batch:
                context = begin()
            batch.append((index, frames, self.pool.submit(call, frames)))
            index += 1
            if len(batch) >= self.args.batch:
                finish()

        draw(strategy, seed, count, sink)
        if batch:
            finish()

    def _scheduler(self, target: str, seed: int, count: int) -> None:
        server = self.scheduler
        assert server is not None
        method = target.split(".", 1)[1]
        descriptor = SCHEDULER.methods_by_name[method]
        strategy = request_frames(descriptor.input_type, descriptor.client_streaming, SCHEDULER_KNOWN)

        def settle(done: list[tuple[int, list[bytes], Outcome]], before: tuple[int, tuple[str, ...]]) -> None:
            if not server.proc.running:
                self._crash(target, seed, done, server)
                return
            refused = [(i, frames) for i, frames, outcome in done if outcome.code != grpc.StatusCode.OK]
            if not refused or server.state() == before:
                return
            # Something committed during the batch: an accepted request, or a refusal that wrote.
            # Each refusal again, alone, between two reads of the detector.
            call = server.call(method)
            for i, frames in refused:
                self.report.tallies[target].rechecked += 1
                alone_before = server.state()
                outcome = call(frames)
                if outcome.code != grpc.StatusCode.OK and server.state() != alone_before:
                    detail = (
                        f"refused with {outcome.code.name} ({outcome.details}) but changed the database or artifacts"
                    )
                    self.report.fail(Failure(target, "state-change", detail, seed, i, frames))

        self._batched(target, strategy, seed, count, server.call(method), settle, server.state)

    def _policy(self, target: str, seed: int, count: int) -> None:
        server = self.policy
        assert server is not None
        method = target.split(".", 1)[1]
        descriptor = POLICY.methods_by_name[method]
        if method == "Session":
            strategy = session_frames(server.digest)
        else:
            strategy = request_frames(descriptor.input_type, descriptor.client_streaming, {})
        call = caller(server.channel, POLICY, method)

        def sessions() -> int:
            return server.identity().load.sessions

        def settle(done: list[tuple[int, list[bytes], Outcome]], before: int) -> None:
            if not server.proc.running:
                self._crash(target, seed, done, server)
                return
            opened = 0
            if method != "Session":
                return
            for i, frames, outcome in done:
                responses = [policy_pb2.SessionResponse.FromString(r) for r in outcome.responses]
                opened += any(r.HasField("opened") for r in responses)
                unknown = refused_in_band(responses)
                if unknown:
                    self.report.fail(Failure(target, "in-band", repr(unknown)[:2000], seed, i, frames))
            if sessions() > before + opened:
                after = sessions()
                detail = (
                    f"{before} sessions before a batch that opened {opened}, {after} after: a refused open left one"
                )
                self.report.fail(Failure(target, "state-change", detail, seed, done[0][0], []))

        parse_nothing: Callable[[], int] = lambda: 0  # noqa: E731  (GetIdentity changes nothing to count)
        self._batched(target, strategy, seed, count, call, settle, sessions if method == "Session" else parse_nothing)

    def _crash(self, target: str, seed: int, done: list[tuple[int, list[bytes], Outcome]], server: Any) -> None:
        """The server died during the batch: every input of it is a suspect; restart and go on."""
        log_tail = server.log.read_text(errors="replace")[-2000:]
        for i, frames, _ in done:
            self.report.fail(Failure(target, "crash", f"server exited; log ends: {log_tail}", seed, i, frames))
        server.restart()


def _frames(value: Any) -> list[bytes]:
    if isinstance(value, bytes):
        return [value]
    manifest = getattr(value, "manifest", None)
    if manifest is not None:
        return [manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()]
    return []


# Main --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000, help="inputs per target (default 100,000)")
    parser.add_argument("--seed", type=int, default=None, help="base seed; chunk j of each target uses SEED+j")
    parser.add_argument("--rpc", action="append", help="a target (repeatable): Submit, Policy.Session, manifest, ...")
    parser.add_argument("--chunk", type=int, default=10_000, help="inputs per target per round (default 10,000)")
    parser.add_argument("--batch", type=int, default=64, help="concurrent requests per batch (default 64)")
    parser.add_argument("--concurrency", type=int, default=32, help="client threads (default 32)")
    parser.add_argument("--out-dir", type=Path, default=None, help="results.json, failures.jsonl, server logs")
    parser.add_argument("--list", action="store_true", help="print the targets and exit")
    args = parser.parse_args(argv)
    if args.count < 1 or args.chunk < 1 or args.batch < 1 or args.concurrency < 1:
        parser.error("--count, --chunk, --batch and --concurrency must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = resolve_targets(args.rpc)
    if args.list:
        print("\n".join(targets))
        return 0
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="fuzz-long-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="work-", dir=out_dir))
    report = Report(out_dir, targets, args.count, seed)
    print(f"fuzz_long: seed {seed}, {args.count} inputs per target, {len(targets)} targets, out {out_dir}", flush=True)
    print(f"  replay all: python -m scripts.fuzz.long --seed {seed} --count {args.count}", flush=True)
    set_on(STOP, signal.SIGTERM)
    runner = Runner(args, report, work)
    finished = False
    try:
        for start in range(0, args.count, args.chunk):
            for target in targets:
                runner.chunk(target, seed + start // args.chunk, min(args.chunk, args.count - start))
                report.write(finished=False)  # a run cut short still leaves its counts
        finished = True
    except KeyboardInterrupt:
        print("fuzz_long: interrupted; the counts below are what ran", flush=True)
    finally:
        runner.close()
        summary = report.write(finished=finished)
    for name, tally in summary["targets"].items():
        print(f"{name:32} {tally['inputs']:>8} inputs  {tally['failures']} failures  {tally['outcomes']}")
    print(
        f"fuzz_long: seed {seed}, {sum(t['inputs'] for t in summary['targets'].values())} inputs in "
        f"{summary['wall_seconds']:.0f} s, {summary['failures']} failures; {out_dir / 'results.json'}",
        flush=True,
    )
    return 1 if report.failures else (0 if finished else 130)


if __name__ == "__main__":
    sys.exit(main())
