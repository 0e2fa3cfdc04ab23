"""The `synthetic` benchmark's manifest builder.

Each episode carries a seeded duration and success draw, so load tests, benchmarks and cluster smoke
tests exercise the whole system with known answers and no simulator. Durations are log-normal
(long-tailed, like real rollouts) around ``mean_seconds``.

``outcomes="policy"`` is a benchmarking device for comparing checkpoints (``scripts/bench/sequential.py``):
with a fixed ``success`` two checkpoints would score every episode alike, so such an entry holds
what decides the outcome instead, and the adapter decides it from what the policy answers
(``benchmarks.synthetic.adapter``, the `synthetic-skill` backend). Per entry: ``base_rate`` (the
task's success probability for a checkpoint of no skill shift), ``draw`` (the episode's uniform
draw, the part of the outcome its seed fixes for every checkpoint), ``draw_shared`` (true with
probability ``shared_fraction``: the episode's outcome is decided by that draw; false: by the
policy's own draw, private to each checkpoint) and ``success_at`` (uniform in [0.25, 0.75]: a
success ends at that fraction of ``duration_s``, a failure runs all of it, as in rollouts that stop
on success). Two checkpoints are then correlated the way one seed correlates them, and their
successes end earlier than their failures. The default, ``outcomes="fixed"``, builds the same bytes
as before the option existed.
"""

from __future__ import annotations

import math
import random

from manifests.format import Manifest, build

BENCHMARK = "synthetic"
# How an entry's outcome is decided: "fixed" by its ``success``; "policy" by the adapter, from the
# entry's draws and the policy's declared skill.
OUTCOMES = ("fixed", "policy")
# A success of a policy-decided entry ends within this range of fractions of its duration.
SUCCESS_AT = (0.25, 0.75)


def build_synthetic(
    episodes: int,
    *,
    seed: int = 0,
    mean_seconds: float = 1.0,
    success_rate: float = 0.5,
    sigma: float = 0.5,
    task: str = "synthetic",
    setting: str = "default",
    outcomes: str = "fixed",
    shared_fraction: float = 0.4,
) -> Manifest:
    """Builds a sealed synthetic manifest; the same arguments always give the same hash.

    With ``outcomes="policy"``, ``success_rate`` is the task's base rate and ``shared_fraction`` the
    probability that an episode's outcome follows its own draw rather than the policy's (see the
    module's docstring); with "fixed" (the default) ``shared_fraction`` is not used."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if mean_seconds < 0 or not math.isfinite(mean_seconds):
        raise ValueError(f"mean_seconds must be a finite number >= 0, got {mean_seconds}")
    if not 0.0 <= success_rate <= 1.0:
        raise ValueError(f"success_rate must be within [0, 1], got {success_rate}")
    if outcomes not in OUTCOMES:
        raise ValueError(f"outcomes must be one of {', '.join(OUTCOMES)}, got {outcomes!r}")
    if not 0.0 <= shared_fraction <= 1.0:
        raise ValueError(f"shared_fraction must be within [0, 1], got {shared_fraction}")
    rng = random.Random(f"{seed}:{task}:{setting}")
    # For a log-normal, mean = exp(mu + sigma^2 / 2).
    mu = math.log(mean_seconds) - sigma**2 / 2 if mean_seconds > 0 else None
    entries = []
    for i in range(episodes):
        duration = round(rng.lognormvariate(mu, sigma), 6) if mu is not None else 0.0
        entry = {"episode_id": f"{task}-{setting}-{i:06d}", "seed": rng.getrandbits(63), "duration_s": duration}
        if outcomes == "fixed":
            entry["success"] = rng.random() < success_rate
        else:
            entry.update(
                base_rate=success_rate,
                draw=rng.random(),
                draw_shared=rng.random() < shared_fraction,
                success_at=round(rng.uniform(*SUCCESS_AT), 6),
            )
        entries.append(entry)
    protocol: dict[str, object] = {"mean_seconds": mean_seconds, "success_rate": success_rate, "sigma": sigma}
    if outcomes == "policy":
        protocol.update(outcomes=outcomes, shared_fraction=shared_fraction)
    return build(
        benchmark=BENCHMARK,
        task=task,
        setting=setting,
        episodes=entries,
        protocol=protocol,
        source={"builder": "synthetic", "seed": seed},
    )
