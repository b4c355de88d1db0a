"""The device side under a hostile or broken coordinator, and under its own operator's typos.

Real coordinators on 127.0.0.1:0 (run in a background thread, as in test_client), real EdgeClients.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3

import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator  # noqa: F401
from fedort.common.clock import ManualClock, use
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.client.cache import ArtifactCache
from fedort.edge_client.transport.retry import Backoff
from fedort.edge_client.transport.grpc_transport import Transport
from fedort.common.errors import ArtifactError, CertificateError, ConfigError, ProtocolError, ResourceExhaustedError
from fedort.protos.messages import TaskKind
from tls_fixtures import pki  # noqa: F401
from edge_support import CoordinatorThread, config, digits, part  # noqa: F401

FAST = Backoff(initial_s=0.05, max_delay_s=0.3, give_up_after_s=60)


@pytest.fixture
def coordinator_thread():
    ct = CoordinatorThread()
    yield ct
    ct.close()


def coordinator_config(mlp_artifacts, state_dir, **overrides):
    from coordinator_fixtures import make_config

    return make_config(mlp_artifacts, state_dir, **overrides)


@pytest.mark.slow
def test_a_rate_limited_join_is_retried_after_the_wait_the_coordinator_names(coordinator_thread, mlp_artifacts,
                                                                           tmp_path, digits):
    port = coordinator_thread.start(coordinator_config(mlp_artifacts, tmp_path / "state", joins_per_minute=0,
                                                       joins_per_minute_per_address=120))
    address = f"127.0.0.1:{port}"
    with Transport.connect(address, insecure=True) as t:   # use up this address's burst of joins
        with pytest.raises(ResourceExhaustedError):
            for i in range(200):
                t.join("filler", client_id=f"filler-{i}")
    client = EdgeClient(config(address, tmp_path, "dev", heartbeats=False), data=part(digits, 0, 2))
    try:
        info = client.join()          # RESOURCE_EXHAUSTED "retry in 0.5 s": waited and retried, not fatal
    finally:
        client.close()
    assert info.client_id


def test_an_artifact_stream_longer_than_announced_is_stopped_at_the_announced_size(tmp_path):
    sent = 0

    def endless():
        nonlocal sent
        while sent < 100:           # a hostile coordinator would go on for 600 MiB
            sent += 1
            yield b"\0" * (1 << 20)

    cache = ArtifactCache(tmp_path / "cache")
    with pytest.raises(ArtifactError, match="announced as 38000 bytes, but the stream sent more"):
        cache.put_blob(hashlib.sha256(b"x").hexdigest(), endless(), size=38_000)
    assert sent == 1
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_a_global_vector_with_nan_is_refused_before_it_is_cached(coordinator_thread, mlp_artifacts, tmp_path, digits):
    state = tmp_path / "state"
    coordinator_thread.start(coordinator_config(mlp_artifacts, state, min_clients=1))
    coordinator_thread.stop()
    poisoned = np.fromfile(state / "vectors" / "round-0001.f32", dtype="<f4")
    poisoned[5] = np.nan
    poisoned.tofile(state / "vectors" / "round-0001.f32")
    con = sqlite3.connect(state / "state.db")      # a consistent but poisoned state: its hash matches
    with con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'initial_vector_sha256'",
                    (hashlib.sha256(poisoned.tobytes()).hexdigest(),))
    con.close()
    port = coordinator_thread.start(coordinator_config(mlp_artifacts, state, min_clients=1))
    client = EdgeClient(config(f"127.0.0.1:{port}", tmp_path, "dev", heartbeats=False), data=part(digits, 0, 2))
    try:
        client.join()
        task = client.poll()
        assert task.kind == TaskKind.FIT
        with pytest.raises(ProtocolError, match="global vector of round 1 holds 1 non-finite value.*index 5"):
            client.handle(task)
        assert not list((tmp_path / "cache-dev" / "vectors").glob("*.f32"))
    finally:
        client.close()


async def test_a_certificate_that_fails_verification_stops_at_once(pki, start_coordinator, tmp_path):  # noqa: F811
    coordinator = await start_coordinator(insecure=False, tls_cert=pki.server_cert, tls_key=pki.server_key)
    slow_to_give_up = Backoff(initial_s=0.05, max_delay_s=0.2, give_up_after_s=60)
    client = EdgeClient(EdgeConfig(f"127.0.0.1:{coordinator.port}", ca_file=pki.other_ca, name="dev",
                                   cache_dir=tmp_path / "c", backoff=slow_to_give_up, heartbeats=False,
                                   rpc_timeout_s=5), data=part(_digits(), 0, 2))
    try:
        with pytest.raises(CertificateError, match="failed verification, which retrying cannot fix"):
            await asyncio.wait_for(asyncio.to_thread(client.join), 30)   # not after 60 s of retries
    finally:
        client.close()


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return {"x": (d.data / 16).astype(np.float32), "labels": d.target.astype(np.int64)}


@pytest.mark.parametrize("address", ["http://127.0.0.1:7420", "grpc://localhost:7420", "https://host:443"])
def test_a_coordinator_address_with_a_scheme_fails_at_start(address, tmp_path):
    with pytest.raises(ConfigError, match="without a scheme"):
        EdgeConfig(address, insecure=True, cache_dir=tmp_path)


def test_a_coordinator_host_that_does_not_resolve_fails_at_start(tmp_path, digits):
    client = EdgeClient(EdgeConfig("no-such-host.invalid:7420", insecure=True, cache_dir=tmp_path, name="dev",
                                   backoff=FAST), data=part(digits, 0, 2))
    with use(ManualClock()) as clock:           # every backoff wait would move this clock
        started = clock.monotonic()
        try:
            with pytest.raises(ConfigError, match="cannot resolve the coordinator host 'no-such-host.invalid'"):
                client.join()
        finally:
            client.close()
        assert clock.monotonic() == started     # failed at once: no retry waited out its backoff


@pytest.mark.slow
def test_an_unacknowledged_update_is_sent_again_when_the_coordinator_returns_and_counts_once(
        coordinator_thread, mlp_artifacts, tmp_path, digits):
    import logging
    import socket
    import threading

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = coordinator_config(mlp_artifacts, tmp_path / "state", rounds=1, min_clients=1, address=f"127.0.0.1:{port}")
    coordinator_thread.start(cfg)
    restarted = threading.Event()

    def away_before_the_upload(task, global_vector, trained):   # runs after training, before the upload
        coordinator_thread.stop()
        return trained

    class RestartOnFirstRetry(logging.Handler):
        """Brings the coordinator back once the client has seen its upload fail (observable, not timed)."""

        def emit(self, record: logging.LogRecord) -> None:
            if "SubmitUpdate" in record.getMessage() and not restarted.is_set():
                restarted.set()
                threading.Thread(target=coordinator_thread.start, args=(cfg,), daemon=True).start()

    retry_log = logging.getLogger("fedort.edge.retry")
    handler, level = RestartOnFirstRetry(), retry_log.level
    retry_log.addHandler(handler)
    retry_log.setLevel(logging.INFO)
    try:
        client = EdgeClient(config(f"127.0.0.1:{port}", tmp_path, "dev", heartbeats=False,
                                   update_hook=away_before_the_upload), data=part(digits, 0, 2))
        summary = client.run()
    finally:
        retry_log.removeHandler(handler)
        retry_log.setLevel(level)
    assert restarted.is_set(), "the upload never failed: the coordinator was not away"
    assert summary.outcome == "done" and summary.rounds_trained == [1]
    con = sqlite3.connect(f"file:{tmp_path / 'state' / 'state.db'}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT round, client_id FROM submissions").fetchall() == [(1, summary.client_id)]
    finally:
        con.close()
