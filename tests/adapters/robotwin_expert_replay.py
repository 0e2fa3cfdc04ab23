"""Lets RoboTwin's own expert play one manifest entry's seed; run by .venv-robotwin's python.

Usage: python robotwin_expert_replay.py ROOT MANIFEST INDEX. Records the 14 joint values RoboTwin's
datasets record of the expert (``benchmarks.robotwin.expert.entry_rows``) and prints one JSON line: the
expert's outcome, how many rows and their sha256, so that two processes can be compared.
"""

import hashlib
import json
import sys

from benchmarks.robotwin.adapter import RoboTwinBenchmark
from benchmarks.robotwin.expert import entry_rows
from manifests.format import read

root, path, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
check, rows = entry_rows(RoboTwinBenchmark(root).runtime, read(path), index)
digest = hashlib.sha256(rows.tobytes()).hexdigest()
print(json.dumps({"expert": check.outcome, "rows": len(rows), "rows_sha256": digest}))
