"""What differs between the two submissions a paired comparison pairs: the factor a gap is due to.

A paired comparison holds the trials fixed, so its difference is due to what else differs between
the two runs. Each of those is recorded and named here, with both values: the checkpoint digest
(the usual comparison; it covers the weights and every backend setting, a state dtype included),
the actions of each chunk executed before the policy was asked again (``execute_steps``, as the
episodes recorded it, else the submission's override), the remote policy server and handshake, and
the simulator stack of manifests paired across stacks (``scheduler.report.StackLink``). One factor
differing explains the gap; several at once do not tell which of them caused it, and the comparison
says so; none means the two runs should agree up to the policy's own randomness.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import provenance
from scheduler.report import Comparison, StackLink

CHECKPOINT = "checkpoint"
EXECUTE_STEPS = "execute_steps"
POLICY_SERVER = "policy server"
STACK = "simulator stack"


@dataclass(frozen=True)
class Factor:
    """One recorded setting with different values in A and B."""

    name: str
    a: str
    b: str
    # The distributions behind a stack's two ids, "mujoco 2.3.7 vs 3.1.6".
    details: list[str] = field(default_factory=list)

    def text(self) -> str:
        """ "execute_steps 5 (override) vs 10 (override)"; a stack adds its distributions."""
        text = f"{self.name} {self.a} vs {self.b}" if self.a != self.b else f"{self.name} {self.a} on both sides"
        return text + (f" ({'; '.join(self.details)})" if self.details else "")


def factors(comparison: Comparison) -> list[Factor]:
    """The factors that differ between the two submissions, in the order above."""
    a, b = comparison.a, comparison.b
    found = []
    if a.checkpoint != b.checkpoint:
        found.append(Factor(CHECKPOINT, _checkpoint(a), _checkpoint(b)))
    if _execute_steps_key(a) != _execute_steps_key(b):
        found.append(Factor(EXECUTE_STEPS, _execute_steps(a), _execute_steps(b)))
    servers_a, servers_b = _servers(a), _servers(b)
    if servers_a != servers_b:
        found.append(Factor(POLICY_SERVER, servers_a, servers_b))
    links = list(comparison.links.values())
    if links:
        found.append(_stack(links))
    return found


def _checkpoint(summary: pb.GetSummaryResponse) -> str:
    return summary.checkpoint or "(any: not pinned)"


def _execute_steps_key(summary: pb.GetSummaryResponse) -> tuple[int | None, ...]:
    """The values the episodes recorded, else the override (None: the checkpoint's, unrecorded)."""
    steps, _ = provenance.tally(summary)
    recorded = tuple(sorted(value for value in steps if value is not None))
    return recorded or (summary.execute_steps if summary.HasField("execute_steps") else None,)


def _execute_steps(summary: pb.GetSummaryResponse) -> str:
    """The actions per chunk the episodes ran with, and whose choice it was."""
    steps, _ = provenance.tally(summary)
    recorded = sorted(value for value in steps if value is not None)
    override = summary.execute_steps if summary.HasField("execute_steps") else None
    source = "override" if override is not None else "checkpoint"
    if not recorded:
        return f"{override} (override, not recorded)" if override is not None else "(not recorded)"
    values = ", ".join(str(value) for value in recorded)
    return f"{values} ({source}{', mixed' if len(recorded) > 1 else ''})"


def _servers(summary: pb.GetSummaryResponse) -> str:
    _, remotes = provenance.tally(summary)
    return ", ".join(sorted(provenance.server_name(key) for key in remotes)) or "(none recorded)"


def _stack(links: Iterable[StackLink]) -> Factor:
    links = list(links)
    ids_a = sorted({link.stack_a for link in links})
    ids_b = sorted({link.stack_b for link in links})
    details = list(dict.fromkeys(d for link in links for d in link.distributions))
    total = sum(len(link.a) for link in links)
    computed: dict[str, int] = {}
    for link in links:
        for name, count in link.computed.items():
            computed[name] = computed.get(name, 0) + count
    details += [f"{name} recorded differently in {count} of {total} episodes" for name, count in computed.items()]
    return Factor(STACK, ", ".join(ids_a), ", ".join(ids_b), details)
