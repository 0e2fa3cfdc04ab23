"""RoboTwin 2.0: the adapter (`adapter`, `episode`), the checkout it drives (`root`, `runtime`,
`config`, `rng`, `cpu_stack`), the manifest builders (`build`, `manifest`, `scan`, `subset`) and its
expert recorded as a policy (`expert`)."""
