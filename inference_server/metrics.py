"""Prometheus metrics of the inference server, served on ``--metrics-port``.

Per-step distributions (batch size each step ran in, queue delay, model time, whole step latency)
are observed where a step is answered. Levels (sessions, attached streams, queue depth, steps and
batches served) are read from the live service at scrape time, so they cost nothing per step; this
module knows the service only as the ``Levels`` it reads, so the two do not import each other.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from inference_server.batcher import Batcher, StepResult

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MS_BUCKETS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)


class Levels(Protocol):
    """What the level collector reads from the Policy service at scrape time."""

    @property
    def sessions(self) -> Sized: ...

    @property
    def attached(self) -> int: ...

    @property
    def batcher(self) -> Batcher | None: ...


class _LevelCollector(Collector):
    def __init__(self, service: Levels) -> None:
        self._service = service

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        service = self._service
        sessions = GaugeMetricFamily("evalfleet_policy_sessions", "Open sessions (attached or not)")
        sessions.add_metric([], len(service.sessions))
        yield sessions
        attached = GaugeMetricFamily("evalfleet_policy_streams", "Session streams attached now")
        attached.add_metric([], service.attached)
        yield attached
        batcher = service.batcher
        depth = GaugeMetricFamily("evalfleet_policy_queue_depth", "Steps waiting for a batch")
        depth.add_metric([], batcher.queue_depth if batcher else 0)
        yield depth
        steps = CounterMetricFamily("evalfleet_policy_steps", "Steps answered by the model")
        steps.add_metric([], batcher.steps_served if batcher else 0)
        yield steps
        batches = CounterMetricFamily("evalfleet_policy_batches", "Model calls (steps / batches = mean batch)")
        batches.add_metric([], batcher.batches_served if batcher else 0)
        yield batches


class PolicyMetrics:
    """One registry per service, so several servers in one process (tests) do not collide."""

    def __init__(self, service: Levels) -> None:
        self.registry = CollectorRegistry()
        self.batch_size = Histogram(
            "evalfleet_policy_step_batch_size",
            "Size of the batch each step ran in",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.queue_ms = Histogram(
            "evalfleet_policy_queue_delay_ms",
            "Time a step waited for its batch",
            buckets=MS_BUCKETS,
            registry=self.registry,
        )
        self.model_ms = Histogram(
            "evalfleet_policy_model_ms",
            "Model time of the batch a step ran in",
            buckets=MS_BUCKETS,
            registry=self.registry,
        )
        self.step_ms = Histogram(
            "evalfleet_policy_step_latency_ms",
            "Observation in to chunk out, inside the server",
            buckets=MS_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_LevelCollector(service))

    def observe_step(self, result: StepResult, step_ms: float) -> None:
        self.batch_size.observe(result.batch_size)
        self.queue_ms.observe(result.queue_ms)
        self.model_ms.observe(result.model_ms)
        self.step_ms.observe(step_ms)

    def serve(self, host: str, port: int) -> int:
        """Starts the /metrics HTTP server on a daemon thread; returns the bound port."""
        httpd, _ = start_http_server(port, addr=host, registry=self.registry)
        return httpd.server_address[1]
