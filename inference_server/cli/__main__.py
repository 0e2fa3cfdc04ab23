"""`python -m inference_server.cli`, the same as the `inference-server` console script."""

import sys

from inference_server.cli import main

sys.exit(main())
