"""The synthetic benchmark: seeded durations and successes, no simulator (`adapter`, `manifest`)."""
