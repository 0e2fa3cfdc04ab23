"""Whether the tests that need LIBERO run here.

Where LIBERO is not installed they are skipped, with one line naming its installer, unless
EVALFLEET_REQUIRE_LIBERO=1 (CI, which installs everything): then nothing is skipped and a missing
install fails them.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

LIBERO_MISSING = importlib.util.find_spec("libero") is None and os.environ.get("EVALFLEET_REQUIRE_LIBERO") != "1"
REASON = "LIBERO is not installed (scripts/install_libero.sh)"
# A module skips itself with `if LIBERO_MISSING: pytest.skip(REASON, allow_module_level=True)`
# before importing what needs LIBERO; a test, with this mark.
NEEDS_LIBERO = pytest.mark.skipif(LIBERO_MISSING, reason=REASON)
