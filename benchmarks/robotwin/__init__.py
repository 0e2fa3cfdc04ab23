"""RoboTwin 2.0: the adapter (`adapter`, `episode`), the checkout it drives (`root`, `runtime`,
`config`, `rng`) and the manifest builders (`build`, `manifest`, `scan`, `subset`)."""
