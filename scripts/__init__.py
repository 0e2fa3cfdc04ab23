"""The tools: benchmarks, chaos runs, fuzzing at volume and profiling, beside the product.

Run from the repository root as modules, ``.venv/bin/python -m scripts.<package>.<module>``
(``python -m scripts.bench.scheduler --quick``); tests import them the same way. Nothing here is
installed (pyproject's package list leaves ``scripts`` out) and no product package imports it
(import-linter holds this). What the product itself runs, such as the local fleet that
``make demo`` starts (``scheduler run examples/specs/demo.yaml``), stays in the product.

- ``scripts.bench``: one module per benchmark, and the servers and workloads they share.
- ``scripts.chaos``: evaluations reconciled after seeded kills (``python -m scripts.chaos``).
- ``scripts.proofs``: long comparisons against the harnesses' own code, whose CI tests run them
  small (``python -m scripts.proofs.libero_openloop``).
- ``scripts.fuzz``: the fuzz strategies and properties the CI tests and the long run share, and the
  long run (``python -m scripts.fuzz.long``).
- ``scripts.common``: what they share (percentiles, tables, progress lines, signals, the command
  line, process costs, network-namespace hosts), one concept per module.
- ``scripts/gpu_check.py``, run as a file on GPU machines
  (``.venv/bin/python scripts/gpu_check.py``); ``scripts/lerobot_tiny.py``, run as a file by
  ``.venv-lerobot``'s python for the lerobot backend's tests and benchmark.

This package and its subpackages import only the standard library when imported: the Labtasker
baseline (``scripts.bench.labtasker_baseline``) runs in a virtual environment without gRPC.
"""
