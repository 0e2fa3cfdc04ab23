"""Helpers for tests of the scheduler's HTTP side: start it with a dashboard, call its JSON API."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

DASHBOARD_LINE = re.compile(r"dashboard on (https?://\S+/)")


def start_with_dashboard(start_scheduler: Callable[..., Any], *extra: str) -> tuple[Any, str]:
    """A scheduler process with ``--http-port 0``, and the dashboard URL it printed."""
    proc = start_scheduler("--http-port", "0", *extra)
    match = proc.wait_for_line(DASHBOARD_LINE.search, 30)
    return proc, match.group(1)


def call(
    url: str, body: Any = None, headers: dict[str, str] | None = None, content_type: str = "application/json"
) -> tuple[int, Any]:
    """GET (no body) or POST JSON; returns (status, decoded JSON or text)."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, headers={**(headers or {})})
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw, kind = response.status, response.read(), response.headers.get_content_type()
    except urllib.error.HTTPError as error:
        status, raw, kind = error.code, error.read(), error.headers.get_content_type()
    return status, json.loads(raw) if kind == "application/json" else raw.decode()
