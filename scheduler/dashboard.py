"""The scheduler's HTTP side: a live dashboard, its JSON API, and Prometheus ``/metrics``.

Why the standard library: the pages poll a handful of small JSON endpoints, so a
``ThreadingHTTPServer`` in a daemon thread is enough and adds no dependency. Reads run the store's
own read functions (``scheduler.store.queries``) on the server's reader connections; writes (cancel,
requeue, priority) run ``scheduler.operations`` on the server's event loop, the layer the gRPC
service calls too, so they share its validation and its group-commit writer. When the scheduler
has a token, every route but ``/login`` needs it, as an ``Authorization: Bearer`` header or the
cookie the login form sets; when it has a TLS certificate, the HTTP side serves HTTPS with it, so
the token never crosses the network in clear. Each submission in ``/api/overview`` carries its
success chart's data (``chart``: per task x setting and per setting, with 95% Wilson intervals),
which the page draws as HTML bars, and, where it evaluates perturbed settings beside their base, its
rows per perturbation axis (``robustness``: ``scheduler.robustness``). ``/api/artifacts/<sha256>``
serves a stored episode artifact (a video) with its media type and single byte ranges, so a
browser's video element can seek in it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import sqlite3
import ssl
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import parse_qs, urlsplit

from evalfleet.scheduler_api.errors import InvalidArgument, NotFound, SchedulerError
from evalfleet.scheduler_api.limits import (
    ARTIFACT_CHUNK_BYTES,
    DEFAULT_LIST_TASKS,
    MAX_DASHBOARD_BODY_BYTES,
    MAX_LIST_TASKS,
    MAX_PRIORITY,
)
from evalfleet.scheduler_api.vocabulary import TASK_STATE_NAMES, TASK_STATES, failure_counts, rate_fields
from evalfleet.v1 import scheduler_pb2 as pb
from manifests import format as manifest_format
from scheduler import provenance, report, robustness, sequential_report
from scheduler.artifacts import ArtifactStore
from scheduler.dashboard_page import LOGIN_PAGE, PAGE
from scheduler.operations import Operations
from scheduler.readers import Readers
from scheduler.store import artifacts as artifact_rows
from scheduler.store import queries
from scheduler.validation import check_sha256
from scheduler.wire_json import counts_dict, message_dict

log = logging.getLogger(__name__)

COOKIE = "evalfleet_token"
ARTIFACT_ROUTE = "/api/artifacts/"
WRITE_TIMEOUT_S = 30.0
_SELECTOR_KEYS = {"submission_id", "task_ids", "route", "states"}
_STATUS_OF_ERROR = {
    "InvalidArgument": HTTPStatus.BAD_REQUEST,
    "NotFound": HTTPStatus.NOT_FOUND,
    "Conflict": HTTPStatus.CONFLICT,
    "StaleLease": HTTPStatus.CONFLICT,
    "PreconditionFailed": HTTPStatus.CONFLICT,
}


class Dashboard:
    """The HTTP server thread; ``start`` returns the bound port (``port=0`` picks a free one)."""

    def __init__(
        self,
        operations: Operations,
        readers: Readers,
        lease_seconds: float,
        loop: asyncio.AbstractEventLoop,
        host: str,
        port: int,
        token: str | None,
        metrics: Callable[[], tuple[bytes, str]],
        tls: ssl.SSLContext | None = None,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        self.artifacts = artifacts
        self.operations = operations
        self.readers = readers
        self.lease_seconds = lease_seconds
        self.loop = loop
        self.token = token
        self.metrics = metrics
        handler = type("BoundHandler", (_Handler,), {"dashboard": self})
        self.httpd = _QuietServer((host, port), handler)
        if tls is not None:
            # The handshake happens on the handler's thread, so a slow client never stalls accept().
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="dashboard", daemon=True)

    def start(self) -> int:
        self._thread.start()
        return self.httpd.server_address[1]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def authorized(self, header: str, cookie_header: str) -> bool:
        if self.token is None:
            return True
        presented = header.removeprefix("Bearer ") if header.startswith("Bearer ") else _cookie(cookie_header)
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())

    def write(self, operation: Callable[[], Any]) -> Any:
        """Runs an operation's coroutine on the server's loop (and so its writer) and waits for it."""
        return asyncio.run_coroutine_threadsafe(operation(), self.loop).result(WRITE_TIMEOUT_S)

    # Reads ---------------------------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        """Everything the front page shows, from one reader call so it is one consistent snapshot."""

        def read(conn: Any) -> dict[str, Any]:
            status = queries.status(conn, "", self.lease_seconds, time.time())
            summaries = [queries.summary(conn, sub.submission_id) for sub in status.submissions]
            workers = queries.list_workers(conn, self.lease_seconds, time.time())
            return {
                "now": time.time(),
                "tasks": counts_dict(status.tasks),
                "submissions": [
                    _submission(sub, summary) | {"robustness": _robustness(conn, summary)}
                    for sub, summary in zip(status.submissions, summaries, strict=True)
                ],
                "workers": [message_dict(worker) for worker in workers.workers],
                "stacks": [message_dict(demand) for demand in status.stacks],
            }

        return self.readers.run_blocking(read)

    def tasks(self, query: dict[str, str]) -> dict[str, Any]:
        selector = selector_from({key: query[key] for key in ("submission_id", "route") if query.get(key)})
        if query.get("state"):
            selector.states.extend(_states([query["state"]]))
        limit = _int(query.get("limit", str(DEFAULT_LIST_TASKS)), "limit", 1, MAX_LIST_TASKS)
        response = self.readers.run_blocking(lambda conn: queries.list_tasks(conn, selector, limit))
        tasks = [message_dict(task) for task in response.tasks]
        if query.get("priority"):
            priority = _int(query["priority"], "priority", 0, MAX_PRIORITY)
            tasks = [task for task in tasks if task["priority"] == priority]
        return {"tasks": tasks, "truncated": response.truncated}

    def task(self, query: dict[str, str]) -> dict[str, Any]:
        task_id = query.get("task_id", "")
        if not task_id:
            raise InvalidArgument("is required", field="task_id")
        return message_dict(self.readers.run_blocking(lambda conn: queries.get_task(conn, task_id)))

    def artifact(self, sha256: str) -> tuple[sqlite3.Row, BinaryIO]:
        """A stored artifact's row (size, media type) and its open file; NotFound when absent."""
        check_sha256(sha256, "sha256")
        if self.artifacts is None:
            raise NotFound("this scheduler serves no artifacts", field="sha256")
        store = self.artifacts
        row = self.readers.run_blocking(lambda conn: artifact_rows.stored_file(conn, sha256))
        try:
            return row, store.open(sha256)
        except FileNotFoundError:
            raise NotFound(f"artifact {sha256} was collected (scheduler gc)", field="sha256") from None

    # Writes --------------------------------------------------------------------------------------

    def operate(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if name == "priority":
            body = dict(body)
            if "priority" not in body:
                raise InvalidArgument("is required", field="priority")
            priority = body.pop("priority")
            if not isinstance(priority, int) or isinstance(priority, bool):
                raise InvalidArgument("must be an integer", field="priority")
            selector = selector_from(body)
            changed = self.write(lambda: self.operations.set_priority(selector, priority))
        else:
            selector = selector_from(body)
            operation = self.operations.cancel if name == "cancel" else self.operations.requeue
            changed = self.write(lambda: operation(selector))
        return {"changed": changed}


def _submission(sub: pb.SubmissionStatus, summary: pb.GetSummaryResponse) -> dict[str, Any]:
    valid = sequential_report.fixed_n_valid(summary)
    entry = message_dict(sub)
    entry["tasks"] = counts_dict(sub.tasks)
    entry["complete"] = summary.complete
    entry.update(rate_fields(sub.episodes_succeeded, sub.episodes_completed, interval_valid=valid))
    entry["provenance"] = provenance.document(summary)
    if sub.HasField("sequential"):
        entry["sequential"] = sequential_report.document(sub.sequential)
        entry["sequential_marks"] = sequential_report.marks(summary)
    entry["manifests"] = [
        {
            "task": m.task,
            "setting": m.setting,
            "benchmark": m.benchmark,
            "planned": m.episodes_planned,
            "completed": m.episodes_completed,
            "succeeded": m.episodes_succeeded,
            **rate_fields(m.episodes_succeeded, m.episodes_completed, interval_valid=valid),
            "failed_attempts": failure_counts(m.failures),
        }
        for m in summary.manifests
    ]
    entry["chart"] = success_chart(summary)
    return entry


def _robustness(conn: sqlite3.Connection, summary: pb.GetSummaryResponse) -> list[dict[str, Any]]:
    """The submission's rows per perturbation axis (``scheduler.robustness``), as RESULTS.json has
    them; empty, and nothing more read, for a submission without perturbed settings."""
    if not robustness.has_perturbations(summary):
        return []
    detailed = queries.summary(conn, summary.submission_id, include_episodes=True)
    stored = {
        m.manifest_hash: manifest_format.parse(queries.get_manifest(conn, m.manifest_hash), m.manifest_hash)
        for m in detailed.manifests
    }
    return robustness.document(robustness.robustness(detailed, stored))


def success_chart(summary: pb.GetSummaryResponse) -> dict[str, Any]:
    """What the dashboard's success chart draws: per setting over all tasks, then per task a bar per
    setting (None where the task was not evaluated in that setting), each with its 95% Wilson
    interval (None where a fixed-N interval is not valid: ``scheduler.sequential_report``); manifests
    of one task x setting merged (``scheduler.report.success_grid``, as the PNG)."""
    grid = report.success_grid(summary.manifests)
    valid = sequential_report.fixed_n_valid(summary)
    return {
        "settings": grid.settings,
        "overall": [_chart_cell(grid.overall[setting], valid) for setting in grid.settings],
        "tasks": [
            {
                "benchmark": task.benchmark,
                "task": task.task,
                "name": task.name,
                "cells": [_chart_cell(task.cells[s], valid) if s in task.cells else None for s in grid.settings],
            }
            for task in grid.tasks
        ],
    }


def _chart_cell(counts: report.Counts, interval_valid: bool) -> dict[str, Any]:
    return {
        "planned": counts.planned,
        "completed": counts.completed,
        "succeeded": counts.succeeded,
        **rate_fields(counts.succeeded, counts.completed, interval_valid=interval_valid),
    }


def selector_from(body: dict[str, Any]) -> pb.TaskSelector:
    """A task selector from JSON, refusing unknown keys and wrong types by field name."""
    for key in body:
        if key not in _SELECTOR_KEYS:
            raise InvalidArgument(f"unknown field; expected one of {sorted(_SELECTOR_KEYS)}", field=key)
    selector = pb.TaskSelector()
    for key in ("submission_id", "route"):
        value = body.get(key, "")
        if not isinstance(value, str):
            raise InvalidArgument("must be a string", field=key)
        setattr(selector, key, value)
    for key in ("task_ids", "states"):
        value = body.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise InvalidArgument("must be a list of strings", field=key)
    selector.task_ids.extend(body.get("task_ids", []))
    selector.states.extend(_states(body.get("states", [])))
    return selector


def _states(names: list[str]) -> list[pb.TaskState]:
    for name in names:
        if name not in TASK_STATES:
            raise InvalidArgument(f"{name!r} is not one of {', '.join(TASK_STATE_NAMES)}", field="states")
    return [TASK_STATES[name] for name in names]


def _int(text: str, field: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(f"{text!r} is not an integer", field=field) from None
    if not low <= value <= high:
        raise InvalidArgument(f"{value} is outside [{low}, {high}]", field=field)
    return value


def byte_range(header: str, size: int) -> tuple[int, int] | str | None:
    """The one byte range (first, last; inclusive) a ``Range`` header asks of ``size`` bytes.

    None: serve the whole (no header, another unit, several ranges, or one that does not parse:
    RFC 9110 lets a server ignore those); "unsatisfiable": the range starts past the end.
    """
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if match is None or not (match[1] or match[2]):
        return None
    if not match[1]:  # the last N bytes
        suffix = int(match[2])
        return (max(0, size - suffix), size - 1) if suffix and size else "unsatisfiable"
    first = int(match[1])
    last = min(int(match[2]), size - 1) if match[2] else size - 1
    if first >= size:
        return "unsatisfiable"
    return None if last < first else (first, last)


def _cookie(header: str) -> str | None:
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return None


class _QuietServer(ThreadingHTTPServer):
    """A client that drops its connection (or fails a TLS handshake) is one log line, not a traceback."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("http connection from %s failed", client_address[0], exc_info=log.isEnabledFor(logging.DEBUG))


class _Handler(BaseHTTPRequestHandler):
    dashboard: Dashboard
    server_version = "evalfleet-scheduler"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        if url.path == "/login":
            return self._send(HTTPStatus.OK, LOGIN_PAGE.replace("{message}", "").encode(), "text/html")
        if not self._authorized():
            if url.path == "/":
                return self._redirect("/login")
            return self._json(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
        routes: dict[str, Callable[[], Any]] = {
            "/api/overview": self.dashboard.overview,
            "/api/tasks": lambda: self.dashboard.tasks(query),
            "/api/task": lambda: self.dashboard.task(query),
        }
        if url.path == "/":
            return self._send(HTTPStatus.OK, PAGE.encode(), "text/html; charset=utf-8")
        if url.path == "/metrics":
            body, content_type = self.dashboard.metrics()
            return self._send(HTTPStatus.OK, body, content_type)
        if url.path in routes:
            return self._answer(routes[url.path])
        if url.path.startswith(ARTIFACT_ROUTE):
            return self._artifact(url.path.removeprefix(ARTIFACT_ROUTE))
        self._json(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})

    def _artifact(self, sha256: str) -> None:
        """The artifact's bytes, whole (200) or one range of them (206); 416 for a range past its end."""
        try:
            row, file = self.dashboard.artifact(sha256)
        except SchedulerError as exc:
            status = _STATUS_OF_ERROR.get(type(exc).__name__, HTTPStatus.INTERNAL_SERVER_ERROR)
            return self._json(status, {"error": str(exc), "field": exc.field})
        size = int(row["size"])
        with file:
            span = byte_range(self.headers.get("Range", ""), size)
            if span == "unsatisfiable":
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = span if isinstance(span, tuple) else (0, size - 1)
            self.send_response(HTTPStatus.PARTIAL_CONTENT if span else HTTPStatus.OK)
            self.send_header("Content-Type", row["media_type"])
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(max(0, end - start + 1)))
            if span:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            # Named by its content: the bytes under this URL never change.
            self.send_header("Cache-Control", "private, max-age=31536000, immutable")
            self.end_headers()
            file.seek(start)
            left = end - start + 1
            while left > 0 and (chunk := file.read(min(ARTIFACT_CHUNK_BYTES, left))):
                self.wfile.write(chunk)
                left -= len(chunk)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/login":
            return self._login()
        if not self._authorized():
            return self._json(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
        name = path.removeprefix("/api/")
        if name not in ("cancel", "requeue", "priority"):
            return self._json(HTTPStatus.NOT_FOUND, {"error": f"no route {path}"})
        self._answer(lambda: self.dashboard.operate(name, self._json_body()))

    def _answer(self, produce: Callable[[], Any]) -> None:
        try:
            self._json(HTTPStatus.OK, produce())
        except SchedulerError as exc:
            status = _STATUS_OF_ERROR.get(type(exc).__name__, HTTPStatus.INTERNAL_SERVER_ERROR)
            self._json(status, {"error": str(exc), "field": exc.field})

    def _json_body(self) -> dict[str, Any]:
        """The request's JSON object; a non-JSON content type is refused (no cross-site form posts)."""
        if self.headers.get_content_type() != "application/json":
            raise InvalidArgument("must be application/json", field="Content-Type")
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_DASHBOARD_BODY_BYTES:
            raise InvalidArgument(f"larger than {MAX_DASHBOARD_BODY_BYTES} bytes", field="body")
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidArgument(f"not valid JSON ({exc})", field="body") from None
        if not isinstance(body, dict):
            raise InvalidArgument("must be a JSON object", field="body")
        return body

    def _login(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), MAX_DASHBOARD_BODY_BYTES)
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        token = form.get("token", [""])[-1]
        if self.dashboard.authorized(f"Bearer {token}", ""):
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Location", "/")
            self.send_header("Set-Cookie", f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        page = LOGIN_PAGE.replace("{message}", "<p class=error>wrong token</p>")
        self._send(HTTPStatus.UNAUTHORIZED, page.encode(), "text/html")

    def _authorized(self) -> bool:
        return self.dashboard.authorized(self.headers.get("Authorization", ""), self.headers.get("Cookie", ""))

    def _redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _json(self, status: HTTPStatus, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)
