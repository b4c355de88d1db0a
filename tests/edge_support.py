"""Shared by the edge-client tests: a Coordinator on its own loop thread, the digits data, client configs and
running clients in threads."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.server import Coordinator
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.transport.retry import Backoff

FAST = Backoff(initial_s=0.05, max_delay_s=0.3, give_up_after_s=60)


class CoordinatorThread:
    """A Coordinator served from a private event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="coordinator-loop", daemon=True)
        self.thread.start()
        self.coordinator: Coordinator | None = None

    def _run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, config: CoordinatorConfig) -> int:
        async def start():
            self.coordinator = Coordinator(config)
            return await self.coordinator.start()
        return self._run(start())

    def stop(self, grace: float = 0.0) -> None:
        if self.coordinator is not None:
            self._run(self.coordinator.stop(grace))
            self.coordinator = None

    def wait_done(self, timeout: float = 30):
        return self._run(self.coordinator.wait_done(), timeout)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


@pytest.fixture(scope="module")
def digits() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return {"x": (d.data / 16).astype(np.float32), "labels": d.target.astype(np.int64)}


def part(digits, i: int, n: int, rows: int | None = None) -> dict[str, np.ndarray]:
    out = {k: v[i::n] for k, v in digits.items()}
    return {k: v[:rows] for k, v in out.items()} if rows else out


@pytest.fixture
def server(tmp_path, mlp_artifacts):
    """start(**config) -> address; the coordinator is stopped after the test (conftest's session-wide
    MLP artifacts, which no test writes into)."""
    ct = CoordinatorThread()

    def start(**overrides) -> str:
        values = dict(artifacts=mlp_artifacts, state_dir=tmp_path / "state", address="127.0.0.1:0", rounds=2,
                      min_clients=2, round_timeout_s=20, local_epochs=1, batch_size=32, lr=0.05,
                      insecure=True, auth="open")
        values.update(overrides)
        port = ct.start(CoordinatorConfig.from_mapping(values))
        return f"127.0.0.1:{port}"

    ct.start_with = start
    yield ct
    ct.close()


def db(tmp_path: Path, sql: str, *args) -> list[tuple]:
    con = sqlite3.connect(f"file:{tmp_path / 'state' / 'state.db'}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def config(address: str, tmp_path: Path, name: str, **kw) -> EdgeConfig:
    kw.setdefault("cache_dir", tmp_path / f"cache-{name}")
    return EdgeConfig(address, name=name, backoff=FAST, poll_wait_ms=2000, insecure=True, **kw)


def start_in_threads(clients: list[EdgeClient]) -> tuple[list[threading.Thread], list]:
    """Run each client in a thread; results[i] is its RunSummary or the exception it raised."""
    results: list = [None] * len(clients)

    def go(i: int) -> None:
        try:
            results[i] = clients[i].run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            results[i] = e

    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(len(clients))]
    for t in threads:
        t.start()
    return threads, results


def run_in_threads(clients: list[EdgeClient], timeout: float = 60) -> list:
    threads, results = start_in_threads(clients)
    for t in threads:
        t.join(timeout)
    for c, t in zip(clients, threads):
        if t.is_alive():
            c.stop("test timeout")
            t.join(5)
    return results
