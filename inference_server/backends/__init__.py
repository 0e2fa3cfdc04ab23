"""The backend registry: a backend's name in a checkpoint's manifest or `--backend`, to its factory.

Built-in factories are named in a checkpoint's manifest (`"backend": "noop"`); any other runtime
plugs in as `module:factory`, from the manifest or from `--backend`. What a backend is, and what
it imports (the `Backend` protocol, `PolicyObservation`, `History`, `RuntimeOptions`, `BackendError`), is
`inference_server.backends.contract`.
"""

from __future__ import annotations

import importlib
from typing import cast

from inference_server.backends.contract import BackendError, BackendFactory, SettingsDeriver

BUILTIN = {
    "noop": "inference_server.backends.reference:noop",
    "deterministic": "inference_server.backends.reference:deterministic",
    "history-echo": "inference_server.backends.reference:history_echo",
    "flat-cost": "inference_server.backends.reference:flat_cost",
    "seeded-random": "inference_server.backends.reference:seeded_random",
    "synthetic-skill": "inference_server.backends.reference:synthetic_skill",
    "vla": "inference_server.backends.vla:load",
    "libero-oracle": "inference_server.backends.oracle:oracle",
    "replay": "inference_server.backends.replay:replay",
    # Runs from .venv-lerobot (make lerobot-venv): LeRobot pins its own torch and numpy.
    "lerobot": "inference_server.backends.lerobot:load",
    "remote": "inference_server.backends.remote:remote",
}


def resolve(name: str) -> BackendFactory:
    """Turns a built-in name or a `module:factory` reference into a factory."""
    target = BUILTIN.get(name, name)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BackendError(f"backend {name!r} is neither built-in ({', '.join(sorted(BUILTIN))}) nor module:factory")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, TypeError) as exc:  # TypeError: a relative name (".x") without a package
        raise BackendError(f"backend {name!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BackendError(f"backend {name!r}: {module_name} has no callable {attr}")
    return cast(BackendFactory, factory)  # a plugin's factory is taken at its word


def settings_deriver(name: str) -> SettingsDeriver | None:
    """The `derive_settings` of the backend's module (how seal fills settings left out), or None
    when the backend derives nothing."""
    resolve(name)  # names a backend that cannot be imported
    module = importlib.import_module(BUILTIN.get(name, name).partition(":")[0])
    deriver = getattr(module, "derive_settings", None)
    return cast(SettingsDeriver, deriver) if callable(deriver) else None
