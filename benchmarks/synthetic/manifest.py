"""The `synthetic` benchmark's manifest builder.

Each episode carries a seeded duration and success draw, so load tests, benchmarks and cluster smoke
tests exercise the whole system with known answers and no simulator. Durations are log-normal
(long-tailed, like real rollouts) around ``mean_seconds``.
"""

from __future__ import annotations

import math
import random

from manifests.format import Manifest, build

BENCHMARK = "synthetic"


def build_synthetic(
    episodes: int,
    *,
    seed: int = 0,
    mean_seconds: float = 1.0,
    success_rate: float = 0.5,
    sigma: float = 0.5,
    task: str = "synthetic",
    setting: str = "default",
) -> Manifest:
    """Builds a sealed synthetic manifest; the same arguments always give the same hash."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if mean_seconds < 0 or not math.isfinite(mean_seconds):
        raise ValueError(f"mean_seconds must be a finite number >= 0, got {mean_seconds}")
    if not 0.0 <= success_rate <= 1.0:
        raise ValueError(f"success_rate must be within [0, 1], got {success_rate}")
    rng = random.Random(f"{seed}:{task}:{setting}")
    # For a log-normal, mean = exp(mu + sigma^2 / 2).
    mu = math.log(mean_seconds) - sigma**2 / 2 if mean_seconds > 0 else None
    entries = []
    for i in range(episodes):
        duration = round(rng.lognormvariate(mu, sigma), 6) if mu is not None else 0.0
        entries.append(
            {
                "episode_id": f"{task}-{setting}-{i:06d}",
                "seed": rng.getrandbits(63),
                "duration_s": duration,
                "success": rng.random() < success_rate,
            }
        )
    return build(
        benchmark=BENCHMARK,
        task=task,
        setting=setting,
        episodes=entries,
        protocol={"mean_seconds": mean_seconds, "success_rate": success_rate, "sigma": sigma},
        source={"builder": "synthetic", "seed": seed},
    )
