"""LIBERO: the adapter (`adapter`), its simulator glue (`runtime`, `sim`) and manifest builder
(`manifest`, `build`)."""
