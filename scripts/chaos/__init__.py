"""Chaos runs: an evaluation while its processes are killed (and, on LIBERO, a worker's host cut off)
at seeded moments, then reconciled with the same evaluation run without faults.

- ``scripts.chaos.synthetic``: the synthetic benchmark, with workers, the scheduler and the
  inference server killed (``tests/test_chaos.py``).
- ``scripts.chaos.libero``: real LIBERO episodes, with episode processes killed too and, as root,
  a worker's host unplugged past its lease (``tests/test_chaos_libero.py``).
- ``scripts.chaos.faults``, ``scripts.chaos.database``: what both share.

``python -m scripts.chaos`` runs either (``--benchmark``).
"""
