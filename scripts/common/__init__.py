"""What the tools share, one concept per module: percentiles, tables, progress lines, signal
handling, the command line that reproduces a run, what a process costs (read from ``/proc``), and
separate hosts on one machine (network namespaces) for the multi-host tests and the LIBERO chaos
run.

Every module here imports only the standard library: the Labtasker baseline, which uses them, runs
in a virtual environment without gRPC or numpy.
"""
