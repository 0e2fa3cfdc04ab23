"""The scheduler: one process over SQLite that owns manifests, tasks, leases and results."""
