"""LIBERO: the adapter (`adapter`), its simulator glue (`runtime`, `sim`) and manifest builder
(`manifest`, `build`, with the harnesses' protocol presets in `protocols`)."""
