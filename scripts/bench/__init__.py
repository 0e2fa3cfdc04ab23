"""The benchmarks: one module per benchmark, each run as ``python -m scripts.bench.<name>``, and the
servers and workloads they share. BENCHMARKS.md gives each one's command and figures."""
