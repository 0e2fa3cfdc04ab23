"""The tools' one percentile function (scripts.common.stats): nearest rank, the definition the
scheduler and load benchmarks judge their targets on, and numpy's linear interpolation, which the
inference, remote-hop and LIBERO per-step figures in BENCHMARKS.md were computed with. The second
must equal `np.percentile` bit for bit, or those commands would no longer reproduce their figures.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from scripts.common.stats import percentile

pytestmark = pytest.mark.timeout(60)


def test_nearest_rank_is_an_observed_sample() -> None:
    samples = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert [percentile(samples, q) for q in (0, 20, 21, 50, 80, 81, 99, 100)] == [1, 1, 2, 3, 4, 5, 5, 5]
    latencies = [float(ms) for ms in range(1, 1001)]
    assert percentile(latencies, 50) == 500.0 and percentile(latencies, 99) == 990.0


@pytest.mark.parametrize("method", ["nearest-rank", "linear"])
def test_no_samples_is_not_a_number(method: str) -> None:
    assert math.isnan(percentile([], 50, method))


def test_linear_is_numpys_to_the_last_bit() -> None:
    rng = random.Random(20261201)
    for _ in range(500):
        samples = [rng.lognormvariate(0.0, 1.0) * 1000.0 for _ in range(rng.randint(1, 300))]
        for q in (0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100):
            assert percentile(samples, q, "linear") == float(np.percentile(samples, q)), (len(samples), q)
