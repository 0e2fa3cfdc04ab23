"""How a submission's episodes were run, in the words `scheduler summary`, RESULTS.json and the
dashboard all use.

Two things change how a score must be read and are not in the manifests or the checkpoint digest
alone: the actions of each policy chunk executed before the policy was asked again (the
checkpoint declares it, a submission may override it), and whether the policy ran behind a
`remote` backend, whose weights no inference server can hash ("remote, unsealed"). Both are
recorded with every episode result; here they are read back from the summary's
``EpisodeProvenance`` groups, and anything that makes the episodes of one submission not
comparable with each other (different execute_steps, different remotes or handshakes) is said.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from evalfleet.v1 import scheduler_pb2 as pb

REMOTE_UNSEALED = "remote, unsealed"
RemoteKey = tuple[str, str, str, bool]  # dialect, url, handshake_sha256, sealed


def _execute_steps(group: pb.EpisodeProvenance) -> int | None:
    return group.execute_steps if group.HasField("execute_steps") else None


def _remote_key(group: pb.EpisodeProvenance) -> RemoteKey | None:
    if not group.HasField("remote"):
        return None
    remote = group.remote
    return (remote.dialect, remote.url, remote.handshake_sha256, remote.sealed)


def tally(summary: pb.GetSummaryResponse) -> tuple[Counter[int | None], Counter[RemoteKey | None]]:
    """Episodes by execute_steps (None: not recorded) and by remote (None: served in-process)."""
    steps: Counter[int | None] = Counter()
    remotes: Counter[RemoteKey | None] = Counter()
    for group in summary.provenance:
        steps[_execute_steps(group)] += group.episodes
        remotes[_remote_key(group)] += group.episodes
    return steps, remotes


def document(summary: pb.GetSummaryResponse) -> dict[str, Any]:
    """The provenance section of RESULTS.json and of the dashboard's submission entry."""
    steps, remotes = tally(summary)
    recorded = sorted(value for value in steps if value is not None)
    served = [key for key in remotes if key is not None]
    return {
        "execute_steps": {
            "override": summary.execute_steps if summary.HasField("execute_steps") else None,
            "values": [{"execute_steps": value, "episodes": steps[value]} for value in recorded],
            "not_recorded_episodes": steps[None],
            "mixed": len(recorded) > 1,
        },
        "remote": {
            "unsealed": any(not sealed for (_, _, _, sealed) in served),
            "episodes": sum(remotes[key] for key in served),
            "in_process_episodes": remotes[None],
            "servers": [
                {"dialect": d, "url": u, "handshake_sha256": h, "sealed": s, "episodes": remotes[(d, u, h, s)]}
                for (d, u, h, s) in sorted(served)
            ],
            "mixed": len(remotes) > 1,
        },
        "marks": marks(summary),
    }


def marks(summary: pb.GetSummaryResponse) -> list[str]:
    """One line per thing a reader of the scores must know, empty when there is none."""
    steps, remotes = tally(summary)
    total = sum(remotes.values())
    lines: list[str] = []
    unsealed = {key: n for key, n in remotes.items() if key is not None and not key[3]}
    if unsealed:
        where = ", ".join(sorted({f"{dialect} {url}" for (dialect, url, _, _) in unsealed}))
        lines.append(
            f"{REMOTE_UNSEALED}: {sum(unsealed.values())} of {total} episodes were answered by a remote policy "
            f"server ({where}) whose weights evalfleet cannot hash"
        )
    if len(remotes) > 1:
        served = "; ".join(f"{server_name(key)}: {remotes[key]} episodes" for key in sorted(remotes, key=_order))
        lines.append(f"episodes were served by {len(remotes)} different policy servers or handshakes ({served})")
    recorded = sorted(value for value in steps if value is not None)
    if len(recorded) > 1:
        ran = "; ".join(f"{value}: {steps[value]} episodes" for value in recorded)
        lines.append(f"episodes ran with different execute_steps (actions per chunk) ({ran})")
    if steps[None] and recorded:
        lines.append(f"execute_steps was not recorded for {steps[None]} episodes (stored by an older scheduler)")
    return lines


def server_name(key: RemoteKey | None) -> str:
    return "in-process" if key is None else f"{key[0]} {key[1]} handshake {key[2][:12] or '(none)'}"


def _order(key: RemoteKey | None) -> tuple[bool, RemoteKey]:
    return (key is not None, key or ("", "", "", False))


def execution_line(summary: pb.GetSummaryResponse) -> str:
    """How many actions of each chunk ran, for the summary table, e.g.
    "execute_steps: 5 actions per chunk (submission override 5)"."""
    recorded = sorted({group.execute_steps for group in summary.provenance if group.HasField("execute_steps")})
    override = summary.execute_steps if summary.HasField("execute_steps") else None
    source = f"submission override {override}" if override is not None else "declared by the checkpoint, or whole chunk"
    if not recorded:
        return f"execute_steps: not recorded ({source})"
    return f"execute_steps: {', '.join(str(value) for value in recorded)} actions per chunk ({source})"
