"""The sealed manifest format: the episodes of an evaluation, fixed in advance and named by their hash."""
