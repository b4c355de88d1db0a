"""edge_client.client: EdgeClient against a real in-process Coordinator on 127.0.0.1:0.

The coordinator is asyncio; it runs on its own event loop in a background thread, and the
(synchronous) clients run in the test thread or in plain threads, as on a device.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.server import Coordinator
from fedort.protos.errors import DataError, WrongModelError
from fedort.protos.messages import TaskKind
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.artifacts import build_artifacts
from fedort.edge_client.cache import ArtifactCache
from fedort.edge_client.client_data import ClientData
from fedort.edge_client.heartbeat import Heartbeat
from fedort.edge_client.models import cnn, mlp
from fedort.edge_client.retry import Backoff
from fedort.edge_client.session import TrainingSession
from fedort.edge_client.transport import ChannelConfig, Transport

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
def artifacts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mlp")
    build_artifacts(mlp(), folder)
    return folder


@pytest.fixture(scope="module")
def digits() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return {"x": (d.data / 16).astype(np.float32), "labels": d.target.astype(np.int64)}


def part(digits, i: int, n: int, rows: int | None = None) -> dict[str, np.ndarray]:
    out = {k: v[i::n] for k, v in digits.items()}
    return {k: v[:rows] for k, v in out.items()} if rows else out


@pytest.fixture
def server(tmp_path, artifacts):
    """start(**config) -> address; the coordinator is stopped after the test."""
    ct = CoordinatorThread()

    def start(**overrides) -> str:
        values = dict(artifacts=artifacts, state_dir=tmp_path / "state", address="127.0.0.1:0", rounds=2,
                      min_clients=2, round_timeout_s=20, local_epochs=1, batch_size=32, lr=0.05,
                      insecure=True, auth="open")
        values.update(overrides)
        port = ct.start(CoordinatorConfig(**values))
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


# ---- the loop ---------------------------------------------------------------------------------

def test_run_trains_every_round_and_returns_when_done(server, tmp_path, digits):
    address = server.start_with(rounds=2)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=part(digits, i, 2)) for i in range(2)]
    summaries = run_in_threads(clients)
    for s in summaries:
        assert not isinstance(s, BaseException), s
        assert s.outcome == "done" and s.rounds_trained == [1, 2]
    assert server.wait_done(5).state.name == "DONE"
    rows = db(tmp_path, "SELECT round, client_id, num_examples FROM submissions ORDER BY round, client_id")
    assert sorted((r, c) for r, c, _ in rows) == sorted((r, s.client_id) for r in (1, 2) for s in summaries)
    assert {n for _, _, n in rows} == {len(part(digits, 0, 2)["x"]), len(part(digits, 1, 2)["x"])}


def test_the_update_carries_the_logged_metrics_with_their_sync_flags(server, tmp_path, digits):
    address = server.start_with(rounds=1)
    data = [ClientData.from_arrays(part(digits, i, 2, 300), val=part(digits, i + 2, 4, 60)) for i in range(2)]
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=data[i]) for i in range(2)]
    run_in_threads(clients)
    (metrics,) = db(tmp_path, "SELECT metrics FROM submissions WHERE client_id = ?", clients[0].client_id)[0]
    assert '"train_loss"' in metrics and '"val_accuracy"' in metrics and '"sync_dist": true' in metrics
    (round_metrics,) = db(tmp_path, "SELECT metrics FROM rounds WHERE round = 1")[0]
    assert "val_accuracy" in round_metrics


def test_evaluate_tasks_report_metrics_without_training(server, tmp_path, digits):
    address = server.start_with(rounds=1, fraction_evaluate=1.0)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=part(digits, i, 2, 200)) for i in range(2)]
    summaries = run_in_threads(clients)
    for s in summaries:
        assert [r.kind for r in s.reports] == ["fit", "evaluate"]
        ev = s.reports[1]
        assert ev.outcome == "accepted" and ev.num_examples == 200 and 0.0 <= ev.metrics["val_accuracy"] <= 1.0
    assert len(db(tmp_path, "SELECT * FROM evaluations")) == 2


# ---- identity -----------------------------------------------------------------------------------

def test_the_client_id_is_saved_and_reused_by_a_restarted_client(server, tmp_path, digits):
    address = server.start_with()
    cache = tmp_path / "shared-cache"
    first = EdgeClient(config(address, tmp_path, "phone", cache_dir=cache), data=part(digits, 0, 4))
    cid = first.join().client_id
    first.close()
    again = EdgeClient(config(address, tmp_path, "phone", cache_dir=cache), data=part(digits, 0, 4))
    assert again.join().client_id == cid
    other = EdgeClient(config(address, tmp_path, "tablet", cache_dir=cache), data=part(digits, 1, 4))
    assert other.join().client_id != cid
    for c in (again, other):
        c.close()
    assert len(db(tmp_path, "SELECT client_id FROM clients")) == 2


def test_an_explicit_client_id_is_registered_as_given(server, tmp_path, digits):
    address = server.start_with()
    client = EdgeClient(config(address, tmp_path, "sim", client_id="client-0007"), data=part(digits, 0, 4))
    assert client.join().client_id == "client-0007"
    client.close()
    assert db(tmp_path, "SELECT client_id FROM clients") == [("client-0007",)]


def test_artifacts_are_downloaded_once_per_cache(server, tmp_path, digits):
    address = server.start_with()
    cache = tmp_path / "cache"
    a = EdgeClient(config(address, tmp_path, "a", cache_dir=cache), data=part(digits, 0, 4))
    a.join()
    blobs = {p: p.stat().st_mtime_ns for p in (cache / "blobs" / "sha256").iterdir()}
    assert len(blobs) == 4
    time.sleep(0.01)
    b = EdgeClient(config(address, tmp_path, "b", cache_dir=cache), data=part(digits, 1, 4))
    b.join()
    assert {p: p.stat().st_mtime_ns for p in (cache / "blobs" / "sha256").iterdir()} == blobs
    for c in (a, b):
        c.close()


# ---- many virtual clients in one process --------------------------------------------------------

def test_virtual_clients_share_one_channel_one_session_and_one_vector_download(server, tmp_path, artifacts, digits):
    address = server.start_with(rounds=2, min_clients=2, min_available_clients=6, fraction=0.5)
    transport = Transport(ChannelConfig(address, insecure=True))
    session = TrainingSession.from_artifacts(artifacts)
    cache = ArtifactCache(tmp_path / "cache")
    clients = [
        EdgeClient(EdgeConfig(address, insecure=True, client_id=f"client-{i:04d}", heartbeats=False, persist_identity=False,
                              backoff=FAST),
                   transport=transport, session=session, cache=cache, data=part(digits, i, 6, 100))
        for i in range(6)
    ]
    try:
        for c in clients:
            c.join()
        done: set[str] = set()
        deadline = time.monotonic() + 40
        while len(done) < len(clients) and time.monotonic() < deadline:
            for c in clients:
                if c.client_id in done:
                    continue
                task = c.poll(wait_ms=0)
                if task.kind == TaskKind.DONE:
                    done.add(c.client_id)
                elif task.kind == TaskKind.FIT:
                    c.handle(task)          # WAIT: the driver moves on instead of sleeping
            time.sleep(0.02)
        assert len(done) == 6
        reports = [r for c in clients for r in c.reports]
        for rnd in (1, 2):
            mine = [r for r in reports if r.round == rnd]
            assert len(mine) == 3 and all(r.outcome == "accepted" for r in mine)
            assert sum(not r.vector_cached for r in mine) == 1  # downloaded once, then shared
        assert len(db(tmp_path, "SELECT * FROM submissions")) == 6
    finally:
        transport.close()


# ---- idempotent and stale submissions -----------------------------------------------------------

def test_a_second_submission_for_the_same_round_counts_once(server, tmp_path, digits):
    address = server.start_with(rounds=1)
    a, b = (EdgeClient(config(address, tmp_path, n), data=part(digits, i, 2, 100)) for i, n in enumerate("ab"))
    a.join()
    b.join()
    task = a.poll()
    assert task.kind == TaskKind.FIT and task.round == 1
    assert a.handle(task).outcome == "accepted"
    assert a.handle(task).outcome == "duplicate"
    assert len(db(tmp_path, "SELECT * FROM submissions WHERE client_id = ?", a.client_id)) == 1
    for c in (a, b):
        c.close()


def test_an_update_for_a_round_that_closed_is_dropped_as_stale(server, tmp_path, digits):
    address = server.start_with(rounds=2)
    a, b = (EdgeClient(config(address, tmp_path, n), data=part(digits, i, 2, 100)) for i, n in enumerate("ab"))
    a.join()
    b.join()
    first = a.poll()
    a.handle(first)
    b.handle(b.poll())                     # round 1 closes; round 2 opens
    assert a.poll().round == 2
    late = a.handle(first)                 # e.g. a device that trained round 1 too slowly
    assert late.outcome == "stale" and "not open" in late.message
    assert len(db(tmp_path, "SELECT * FROM submissions WHERE round = 2")) == 0
    for c in (a, b):
        c.close()


# ---- refusing what cannot work --------------------------------------------------------------------

def test_data_that_cannot_be_used_is_refused_before_joining(server, tmp_path, digits):
    address = server.start_with()
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=digits["x"][:10], labels=digits["labels"][:9])
    client = EdgeClient(config(address, tmp_path, "bad", data=bad))
    with pytest.raises(DataError, match="same number of rows"):
        client.join()
    client.close()
    assert db(tmp_path, "SELECT * FROM clients") == []


def test_data_of_the_wrong_dtype_is_refused_and_the_client_leaves(server, tmp_path, digits):
    address = server.start_with()
    data = {"x": digits["x"][:50].astype(np.float64), "labels": digits["labels"][:50]}
    client = EdgeClient(config(address, tmp_path, "bad"), data=data)
    with pytest.raises(DataError, match=r"'x' must be float32\[\?, 64\], got float64\[50, 64\]"):
        client.join()
    client.close()
    ((active, reason),) = db(tmp_path, "SELECT active, left_reason FROM clients")
    assert active == 0 and "does not fit" in reason


def test_a_known_manifest_refuses_bad_data_before_joining_again(server, tmp_path, digits):
    address = server.start_with()
    cache = tmp_path / "cache"
    good = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data=part(digits, 0, 4))
    good.join()
    good.close()
    seen = db(tmp_path, "SELECT last_seen_ms FROM clients")
    bad = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data={"x": digits["x"][:20]})
    with pytest.raises(DataError, match=r"lacks array\(s\) \['labels'\]"):
        bad.join()
    bad.close()
    assert db(tmp_path, "SELECT last_seen_ms FROM clients") == seen  # nothing was sent


def test_a_session_of_another_model_is_refused(server, tmp_path, digits):
    address = server.start_with()
    other = tmp_path / "cnn"
    build_artifacts(cnn(), other)
    client = EdgeClient(config(address, tmp_path, "dev"), session=TrainingSession.from_artifacts(other),
                        data=part(digits, 0, 4))
    with pytest.raises(WrongModelError, match="model"):
        client.join()
    client.close()


# ---- liveness, stopping, restarts -----------------------------------------------------------------

def test_heartbeats_are_sent_while_busy(server, tmp_path, digits):
    address = server.start_with()
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 4))
    client.join()
    with Heartbeat(client.transport, client.client_id, 0.1) as hb:
        time.sleep(1.0)
    assert hb.sent >= 3 and hb.failed == 0
    client.close()


def test_stop_cuts_a_long_poll_short_and_leaves(server, tmp_path, digits):
    address = server.start_with(min_clients=2)           # one client alone never gets a task
    client = EdgeClient(EdgeConfig(address, insecure=True, name="dev", cache_dir=tmp_path / "c", poll_wait_ms=30_000,
                                   backoff=FAST), data=part(digits, 0, 4))
    client.join()
    threading.Timer(0.5, client.stop, args=("test stop",)).start()
    started = time.monotonic()
    summary = client.run()
    assert summary.outcome == "stopped" and time.monotonic() - started < 5
    assert db(tmp_path, "SELECT active, left_reason FROM clients") == [(0, "test stop")]


def test_clients_resume_after_the_coordinator_restarts(tmp_path, artifacts, digits):
    # a real crash: the coordinator process is SIGKILLed after round 1 and started again on the same port
    from chaos_support import CoordinatorProcess

    flags = dict(rounds=3, min_clients=2, round_timeout=20, local_epochs=1, batch_size=32, lr=0.05)
    first = CoordinatorProcess(artifacts, tmp_path / "state", tmp_path / "coordinator.log", **flags)
    address = f"127.0.0.1:{first.port}"
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=part(digits, i, 2, 300)) for i in range(2)]
    threads, results = start_in_threads(clients)
    again = None
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not db(tmp_path, "SELECT * FROM rounds WHERE round = 1 AND closed_ms"):
            time.sleep(0.02)
        first.kill()
        again = CoordinatorProcess(artifacts, tmp_path / "state", tmp_path / "coordinator.log", address=address,
                                   **flags)
        for t in threads:
            t.join(60)
        assert all(getattr(s, "outcome", None) == "done" for s in results), results
        assert again.proc.wait(30) == 0
    finally:
        for c in clients:
            c.stop()
        for p in (first, again):
            if p is not None:
                p.kill()
    ids = {c.client_id for c in clients}
    assert {c for (c,) in db(tmp_path, "SELECT client_id FROM clients")} == ids  # same identities
    rows = db(tmp_path, "SELECT round, client_id FROM submissions")
    assert sorted(rows) == sorted((r, c) for r in (1, 2, 3) for c in ids)   # each counted exactly once


# ---- configuration --------------------------------------------------------------------------------

def test_config_file_settings_are_overridden_by_flags(tmp_path):
    (tmp_path / "edge.toml").write_text(
        '[edge]\ncoordinator = "10.0.0.5:7420"\ndata = "client.npz"\nname = "phone"\npoll_wait_ms = 5000\n'
        '[edge.backoff]\ninitial_s = 0.5\nmax_delay_s = 4.0\n')
    cfg = EdgeConfig.load(tmp_path / "edge.toml", name="tablet", client_id=None)
    assert cfg.coordinator == "10.0.0.5:7420" and cfg.name == "tablet" and cfg.poll_wait_ms == 5000
    assert Path(cfg.data) == tmp_path / "client.npz"          # relative to the file
    assert cfg.backoff == Backoff(initial_s=0.5, max_delay_s=4.0)


def test_unknown_config_keys_are_refused(tmp_path):
    from fedort.protos.errors import ConfigError

    (tmp_path / "edge.toml").write_text('coordinator = "127.0.0.1:1"\npoll_wait = 5\n')
    with pytest.raises(ConfigError, match=r"unknown edge setting\(s\) \['poll_wait'\]"):
        EdgeConfig.load(tmp_path / "edge.toml")
    with pytest.raises(ConfigError, match="HOST:PORT"):
        EdgeConfig("no-port").channel_config()


def test_a_shared_session_refuses_bad_data_before_joining(server, tmp_path, artifacts, digits):
    address = server.start_with()
    client = EdgeClient(EdgeConfig(address, insecure=True, client_id="client-0001", persist_identity=False),
                        session=TrainingSession.from_artifacts(artifacts), cache=ArtifactCache(tmp_path / "c"),
                        data={"x": digits["x"][:20]})
    with pytest.raises(DataError, match=r"lacks array\(s\) \['labels'\]"):
        client.join()
    client.close()
    assert db(tmp_path, "SELECT * FROM clients") == []


def test_a_coordinator_that_lost_its_state_gets_the_same_client_back(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=1)
    port = int(address.rsplit(":", 1)[1])
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 4, 100))
    cid = client.join().client_id
    server.stop()
    server.start_with(rounds=1, min_clients=1, address=f"127.0.0.1:{port}", state_dir=tmp_path / "state-new")
    summary = client.run()                      # poll -> NOT_FOUND "unknown client" -> re-Join as cid
    assert summary.outcome == "done" and summary.rounds_trained == [1] and summary.client_id == cid


def test_a_coordinator_that_now_runs_another_model_ends_the_client(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=2)
    port = int(address.rsplit(":", 1)[1])
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 4, 100))
    client.join()
    server.stop()
    other = tmp_path / "mlp-sgd"
    build_artifacts(mlp(), other, optimizer="sgd")
    server.start_with(artifacts=other, address=f"127.0.0.1:{port}", state_dir=tmp_path / "state-other")
    with pytest.raises(WrongModelError, match="now runs model .* restart the client"):
        client.run()


def test_stop_during_local_training_ends_the_fit_after_the_current_batch(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=1, local_epochs=5000)   # minutes of training
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 2))
    result: list = []
    thread = threading.Thread(target=lambda: result.append(client.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while client.phase != "training" and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    started = time.monotonic()
    client.stop("app closing")
    thread.join(10)
    assert result and result[0].outcome == "stopped" and time.monotonic() - started < 3
    assert db(tmp_path, "SELECT * FROM submissions") == []
    assert db(tmp_path, "SELECT active, left_reason FROM clients") == [(0, "app closing")]


def test_two_running_clients_cannot_share_one_saved_identity(server, tmp_path, digits):
    from fedort.protos.errors import ConfigError

    address = server.start_with()
    cache = tmp_path / "cache"
    first = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data=part(digits, 0, 4))
    first.join()
    twin = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data=part(digits, 1, 4))
    with pytest.raises(ConfigError, match="same identity .* own --name or --cache-dir"):
        twin.join()
    first.close()
    assert twin.join().client_id == first.client_id      # free again once the first one is gone
    twin.close()


def test_clients_on_one_machine_with_their_own_data_files_get_their_own_identities(server, tmp_path, digits):
    address = server.start_with()
    files = []
    for i in range(2):
        files.append(tmp_path / f"client-{i}.npz")
        np.savez(files[-1], **part(digits, i, 4))
    shared = dict(cache_dir=tmp_path / "cache")        # same host name, same cache folder
    a = EdgeClient(EdgeConfig(address, insecure=True, data=files[0], backoff=FAST, **shared))
    b = EdgeClient(EdgeConfig(address, insecure=True, data=files[1], backoff=FAST, **shared))
    assert a.join().client_id != b.join().client_id
    for c in (a, b):
        c.close()


# ---- research/testing hook ------------------------------------------------------------------------

def test_an_update_hook_replaces_the_uploaded_vector_given_the_rounds_global_vector(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=1)
    seen = []

    def hook(task, global_vector, local_vector):
        seen.append((task.round, global_vector.copy(), local_vector.copy()))
        return global_vector + np.float32(1.0)

    client = EdgeClient(config(address, tmp_path, "dev0", update_hook=hook), data=part(digits, 0, 2, 100))
    assert client.run().rounds_trained == [1]
    vectors = tmp_path / "state" / "vectors"
    start = np.fromfile(vectors / "round-0001.f32", dtype="<f4")
    (round_, given, trained), = seen
    assert round_ == 1 and np.array_equal(given, start) and not np.array_equal(trained, start)
    np.testing.assert_allclose(np.fromfile(vectors / "round-0002.f32", dtype="<f4"), start + 1.0, atol=1e-6)
