"""Prometheus metrics of one coordinator, served over HTTP by `serve --metrics-address HOST:PORT`.

| metric | type | labels | what |
| --- | --- | --- | --- |
| fedort_rounds_committed_total | counter | | rounds committed (from `state.db`, so it survives restarts) |
| fedort_rounds_failed_total | counter | | rounds that ended FAILED |
| fedort_round_duration_seconds | histogram | | opening to commit of each committed round |
| fedort_round | gauge | | the round being trained (or next) |
| fedort_round_state | gauge | state | 1 for the engine's current state |
| fedort_clients | gauge | state=registered/active/selected | clients known, not left, selected this round |
| fedort_upload_slots_in_use | gauge | | updates being received at once (bounded) |
| fedort_updates_total | counter | result=accepted/duplicate/refused, reason | update submissions and why one was refused (status code) |
| fedort_rpc_errors_total | counter | method, code | every RPC that ended with an error status |
| fedort_auth_failures_total | counter | | calls refused UNAUTHENTICATED or PERMISSION_DENIED |
| fedort_bytes_total | counter | direction=in/out | update bytes received, vector and artifact bytes sent |
| fedort_group_commits_total | counter | | durable group commits of arriving updates (`arrival_commit`; accepted / this = mean group size) |
| fedort_storage_errors_total | counter | | disk-full events (a refused call, or an engine step waiting for space) |

Counters the servicer feeds are per process lifetime (Prometheus handles resets); the round
counts and durations are read from `state.db` at scrape time, and the gauges from the engine.
Each Coordinator owns its own registry, so several coordinators in one process (tests) do not mix.
The HTTP server serves at most MAX_SCRAPES connections at once with a READ_TIMEOUT_S read timeout.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from fedort.common.invariants import present
from fedort.common.round_state import RoundRowState
from fedort.coordinator.state import storage
from fedort.coordinator.state.layout import StateLayout
from fedort.protos.status_codes import status_for

log = logging.getLogger(__name__)

DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
_AUTH_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
MAX_SCRAPES = 4  # /metrics connections served at once
READ_TIMEOUT_S = 5.0  # a scrape connection's socket timeout


class Monitoring:
    """The metrics of one coordinator and the small calls that feed them."""

    def __init__(self, *, listen: bool = True) -> None:
        self.registry = CollectorRegistry()
        self._updates = Counter(
            "fedort_updates",
            "Update submissions by result and refusal reason",
            ["result", "reason"],
            registry=self.registry,
        )
        self._rpc_errors = Counter(
            "fedort_rpc_errors", "RPCs that ended with an error status", ["method", "code"], registry=self.registry
        )
        self._auth_failures = Counter(
            "fedort_auth_failures", "Calls refused UNAUTHENTICATED or PERMISSION_DENIED", registry=self.registry
        )
        self._bytes = Counter(
            "fedort_bytes",
            "Payload bytes received (updates) and sent (vectors, artifacts)",
            ["direction"],
            registry=self.registry,
        )
        self._slots = Gauge("fedort_upload_slots_in_use", "Updates being received at once", registry=self.registry)
        self._group_commits = Counter(
            "fedort_group_commits", "Durable group commits of arriving updates", registry=self.registry
        )
        self._storage_errors = Counter(
            "fedort_storage_errors", "Disk-full events: refused calls and engine waits", registry=self.registry
        )
        for d in ("in", "out"):
            self._bytes.labels(d)
        self._updates.labels("accepted", "")
        self._engine: Any = None
        self._state_dir: Path | None = None
        self._http: _Server | None = None
        self.registry.register(_EngineCollector(self))
        if listen:
            storage.add_listener(self._storage_full)

    @classmethod
    def disabled(cls) -> Monitoring:
        """Metrics nobody serves nor hears engine events for (a servicer built without a Coordinator)."""
        return cls(listen=False)

    # ---- feeding ------------------------------------------------------------------------------

    def attach(self, engine: Any, state_dir: Path) -> None:
        """Read gauges from `engine` and round history from `state_dir/state.db` at scrape time."""
        self._engine, self._state_dir = engine, state_dir

    def update_accepted(self, duplicate: bool = False) -> None:
        self._updates.labels("duplicate" if duplicate else "accepted", "").inc()

    def call_failed(self, method: str, exc: BaseException) -> None:
        """Count an RPC that ends with an error (the servicer's error boundary calls this once per failure)."""
        code, _ = status_for(exc)
        self._rpc_errors.labels(method, code.name).inc()
        if method == "SubmitUpdate":
            self._updates.labels("refused", code.name).inc()
        if code in _AUTH_CODES:
            self._auth_failures.inc()
        if isinstance(exc, storage.StorageError):
            self._storage_errors.inc()

    @contextlib.asynccontextmanager
    async def upload_slot(self) -> AsyncIterator[None]:
        """Held (inside the engine's slot) while an update is received: feeds fedort_upload_slots_in_use."""
        self._slots.inc()
        try:
            yield
        finally:
            self._slots.dec()

    def group_committed(self, size: int) -> None:
        self._group_commits.inc()

    def bytes_in(self, n: int) -> None:
        self._bytes.labels("in").inc(n)

    def bytes_out(self, n: int) -> None:
        self._bytes.labels("out").inc(n)

    def _storage_full(self, err: Exception) -> None:
        self._storage_errors.inc()

    # ---- serving ------------------------------------------------------------------------------

    def serve(self, address: str) -> int:
        """Serve /metrics on HOST:PORT (port 0 picks one); returns the bound port."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        server_class = _Server6 if ":" in host else _Server
        server = make_server(host, int(port), make_wsgi_app(self.registry), server_class, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, name="fedort-metrics", daemon=True).start()
        self._http = server
        bound = server.server_address[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", host, bound)
        return bound

    def stop(self) -> None:
        storage.remove_listener(self._storage_full)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class _Server(WSGIServer):
    """/metrics over HTTP (prometheus_client's own server differs across its versions): at most MAX_SCRAPES
    connections are served at once, by a pool of that many threads, each read with a READ_TIMEOUT_S socket
    timeout; a connection beyond them is closed at once, so idle or half-open connections cost no threads."""

    _pool: ThreadPoolExecutor | None = None
    _busy: threading.BoundedSemaphore | None = None

    def process_request(self, request, client_address) -> None:
        if self._pool is None or self._busy is None:
            self._pool = ThreadPoolExecutor(MAX_SCRAPES, thread_name_prefix="fedort-metrics-scrape")
            self._busy = threading.BoundedSemaphore(MAX_SCRAPES)
        if not self._busy.acquire(blocking=False):
            self.shutdown_request(request)
            return
        self._pool.submit(self._serve_one, request, client_address)

    def _serve_one(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - a broken or timed-out scrape: socketserver's report, then the next
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            present(self._busy, "the scrape slots").release()

    def server_close(self) -> None:
        super().server_close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = READ_TIMEOUT_S  # a connection that sends nothing is closed after this (StreamRequestHandler)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


class _EngineCollector:
    """Gauges from the live engine and round history from SQLite, computed at each scrape."""

    def __init__(self, monitoring: Monitoring) -> None:
        self._m = monitoring

    def describe(self):
        return []

    def collect(self):
        yield from self._rounds()
        engine = self._m._engine
        clients = GaugeMetricFamily("fedort_clients", "Clients by state", labels=["state"])
        if engine is not None:  # a round_engine.RoundEngine: registry, selected, round, state
            registry = engine.registry
            for _attempt in range(3):  # the event loop may change the client table while this thread counts
                try:
                    active = registry.active_count()
                    break
                except RuntimeError:
                    active = None
            clients.add_metric(["registered"], len(registry))
            if active is not None:
                clients.add_metric(["active"], active)
            clients.add_metric(["selected"], len(engine.selected))
            current = GaugeMetricFamily("fedort_round", "The round being trained (or next)")
            current.add_metric([], engine.round)
            yield current
            state = GaugeMetricFamily("fedort_round_state", "1 for the engine's current state", labels=["state"])
            state.add_metric([engine.state.name], 1)
            yield state
        yield clients

    def _rounds(self):
        committed = CounterMetricFamily("fedort_rounds_committed", "Rounds committed")
        failed = CounterMetricFamily("fedort_rounds_failed", "Rounds that ended FAILED")
        duration = HistogramMetricFamily("fedort_round_duration_seconds", "Opening to commit of committed rounds")
        rows = self._rows()
        done = [r for r in rows if RoundRowState(r[0]).committed]
        committed.add_metric([], len(done))
        failed.add_metric([], sum(1 for r in rows if RoundRowState(r[0]) is RoundRowState.FAILED))
        seconds = [max(0.0, (closed - opened) / 1000) for _, opened, closed in done if closed is not None]
        buckets = [(str(float(b)), sum(1 for s in seconds if s <= b)) for b in DURATION_BUCKETS]
        buckets.append(("+Inf", len(seconds)))
        duration.add_metric([], buckets, sum_value=sum(seconds))
        yield committed
        yield failed
        yield duration

    def _rows(self) -> list[tuple[str, int, int | None]]:
        import sqlite3

        state_dir = self._m._state_dir
        db = StateLayout(state_dir).db if state_dir is not None else None
        if db is None or not db.is_file():
            return []
        try:  # a private read-only connection: the scrape runs in the HTTP server's thread
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                return con.execute("SELECT state, opened_ms, closed_ms FROM rounds").fetchall()
            finally:
                con.close()
        except sqlite3.Error as e:
            log.warning("metrics: cannot read %s: %s", db, e)
            return []


__all__ = ["Monitoring"]
