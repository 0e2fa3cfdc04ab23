"""What a paused (or capped) submission ahead in the queue costs every claim, against none, same run.

A claim takes the first row of the claim index in (priority, seq) order. A paused submission's
pending tasks must not be claimed: until schema version 7 they stayed in that index and the claim
query skipped them with a ``NOT EXISTS`` on their submission, so when the paused submission had the
higher priority, each claim stepped over all of its rows first. Since version 7 they are ``held``
and outside the index. This measures it: a scheduler with P pending tasks of a paused submission at
priority 1 and an active submission at priority 0, timed sequential claims of the active one's
tasks from one client; P = 0 is the baseline, and each row's ratio is against it.

With ``--ahead capped`` the submission ahead is not paused but at its cap of tasks leased at once
(``max_leased_tasks`` 1, its one task leased): a claim steps past its dispatch group with index
seeks (``scheduler.store.leases``), and its cost should not grow with P either.

    .venv/bin/python -m scripts.bench.paused_claims                       # 0, 1k, 10k, 100k; ~3 min
    .venv/bin/python -m scripts.bench.paused_claims --paused 0,1000 --claims 200
    .venv/bin/python -m scripts.bench.paused_claims --ahead capped
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from scripts.bench.drain import WARMUP_CLAIMS, ClaimCost, measure_claims
from scripts.bench.evalfleet_scheduler import ROUTE, evalfleet_populate, evalfleet_server
from scripts.common.progress import progress
from scripts.common.tables import markdown


def paused_ahead_costs(tmp: Path, paused: Sequence[int], claims: int, ahead: str = "paused") -> list[ClaimCost]:
    """One scheduler per backlog: ``pending`` tasks held back at priority 1 (paused, or ``ahead``
    "capped": at a cap of one leased task, one leased), then enough active ones."""
    results = []
    for pending in paused:
        db = tmp / f"paused-{pending}.sqlite"
        with evalfleet_server(db, "normal") as server:
            with SchedulerClient(server.address, timeout=600) as client:
                client.wait_ready(30)
                if pending:
                    held = build_synthetic(pending + 1, seed=2, mean_seconds=0.0)
                    cap = 1 if ahead == "capped" else 0
                    client.submit([held], ROUTE, batch_size=1, submission_id="held", priority=1, max_leased_tasks=cap)
                    if cap:
                        client.claim("bench-holder", [ROUTE])  # its one task in flight: the rest wait
                    else:
                        client.pause("held")
                evalfleet_populate(server.address, claims + WARMUP_CLAIMS, "active")
                result = measure_claims(
                    f"{pending:,} {ahead} ahead", server, lambda: client.claim("bench-claims", [ROUTE]), pending, claims
                )
                last = client.claim("bench-check", [ROUTE])
                if last is not None and last.submission_id == "held":
                    raise RuntimeError(f"a {ahead} submission's task was claimed")
        progress(f"{result.system}: mean {result.mean_ms:.2f} ms, server CPU {result.cpu_ms_per_claim:.3f} ms/claim")
        results.append(result)
    return results


def report(results: Sequence[ClaimCost], ahead: str = "paused") -> str:
    base = results[0]
    rows = [
        [
            f"{r.pending:,}",
            f"{r.mean_ms:.2f}",
            f"{r.p99_ms:.2f}",
            f"{r.cpu_ms_per_claim:.3f}",
            f"{r.mean_ms / base.mean_ms:.2f}x",
            f"{r.cpu_ms_per_claim / base.cpu_ms_per_claim:.2f}x",
        ]
        for r in results
    ]
    header = [f"{ahead} tasks ahead", "claim mean ms", "p99 ms", "server CPU ms/claim", "x mean", "x CPU"]
    return markdown(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paused", default="0,1000,10000,100000", help="paused backlogs, the first the baseline")
    parser.add_argument("--claims", type=int, default=500, help="timed claims per backlog (default 500)")
    parser.add_argument("--ahead", choices=("paused", "capped"), default="paused", help="how the backlog is held")
    args = parser.parse_args(argv)
    paused = [int(v) for v in args.paused.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-paused-") as tmp:
        results = paused_ahead_costs(Path(tmp), paused, args.claims, args.ahead)
    print(report(results, args.ahead))
    return 0


if __name__ == "__main__":
    sys.exit(main())
