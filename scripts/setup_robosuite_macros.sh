#!/usr/bin/env bash
# robosuite warns at every import (3 lines per process) until it finds robosuite/macros_private.py,
# the per-install settings file its scripts/setup_macros.py creates as a copy of its macros.py. This
# does what that script does, without its prompt, for the robosuite PYTHON imports (with PYTHONPATH
# as given, so that a stack overlay gets its own). The copy holds robosuite's defaults: no setting
# changes, so neither does any episode.
# Usage: scripts/setup_robosuite_macros.sh PYTHON
set -euo pipefail
"$1" - <<'PYTHON'
import importlib.util
import shutil
from pathlib import Path

spec = importlib.util.find_spec("robosuite")
assert spec is not None and spec.origin is not None, "robosuite is not installed"
package = Path(spec.origin).parent
private = package / "macros_private.py"
if not private.exists():
    shutil.copyfile(package / "macros.py", private)
PYTHON
