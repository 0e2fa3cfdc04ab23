"""`python -m scheduler.cli`, the same as the `scheduler` console script."""

import sys

from scheduler.cli import main

sys.exit(main())
