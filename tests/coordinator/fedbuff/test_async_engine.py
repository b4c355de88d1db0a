"""`mode = "async"` (FedBuff) through a real coordinator and real gRPC clients: K updates make one
version, staleness weights scale stale updates, updates past max staleness are refused with
FAILED_PRECONDITION, a re-sent update is a duplicate even after its buffer committed, and a
SIGKILLed `fedort coordinator serve --mode async` resumes without losing or double-counting."""

from __future__ import annotations

import asyncio
import hashlib
import json

import grpc
import numpy as np
import pytest

from chaos_support import CoordinatorProcess, vector_files
from coordinator_fixtures import P_MLP, chunks_of, mlp_artifacts, start_coordinator, stub_client, update_header  # noqa: F401
from fedort.coordinator import RoundState
from fedort.coordinator.state.layout import StateLayout
from fedort.protos.stubs import fedort_v1_pb2 as pb

ASYNC = dict(mode="async", min_clients=1)


async def _join(client, *ids: str) -> str:
    return [(await client.join(c)).model_id for c in ids][0]


async def _train(client, cid: str, model: str, expect_version: int, delta: float) -> tuple[int, np.ndarray, np.ndarray]:
    """Poll (FIT on the latest version), download it, 'train': (version, its vector, the update)."""
    task = await client.poll(cid, model)
    assert (task.kind, task.round) == (pb.Task.FIT, expect_version), task
    _, vector = await client.download_vector(cid, model, task.round)
    return task.round, vector, (vector + np.float32(delta)).astype(np.float32)


async def test_k_updates_make_one_version_with_their_example_weighted_mean_delta(start_coordinator, stub_client,
                                                                                tmp_path):
    coord = await start_coordinator(rounds=1, buffer_size=2, **ASYNC)
    client = stub_client(coord.port)
    model = await _join(client, "client-a", "client-b", "client-c")
    v, g, up_a = await _train(client, "client-a", model, 1, 1.0)
    _, _, up_b = await _train(client, "client-b", model, 1, 4.0)
    assert (await client.submit("client-a", model, v, up_a, 10)).accepted
    assert coord.engine.round == 1                               # one of K = 2: no new version yet
    assert (await client.submit("client-b", model, v, up_b, 30)).accepted
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    _, final = await client.download_vector("client-c", model, 2)
    np.testing.assert_allclose(final, g + (10 * 1.0 + 30 * 4.0) / 40, atol=1e-5)
    record = json.loads(StateLayout(tmp_path / "state").model_record(1).read_text())
    assert record["clients"] == 2 and record["metrics"]["staleness_0"] == 2
    assert record["training_config"]["mode"] == "async" and record["training_config"]["buffer_size"] == 2


async def test_a_stale_update_counts_with_its_staleness_weight(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2, buffer_size=2, staleness_weight="poly:1", **ASYNC)
    client = stub_client(coord.port)
    model = await _join(client, "client-a", "client-b", "client-c")
    v1, _, up_a = await _train(client, "client-a", model, 1, 2.0)       # a trains on version 1 ...
    for cid in ("client-b", "client-c"):
        v, _, up = await _train(client, cid, model, 1, 0.0)
        assert (await client.submit(cid, model, v, up, 5)).accepted       # ... which b and c turn into version 2
    assert coord.engine.round == 2
    reply = await client.submit("client-a", model, v1, up_a, 5)         # staleness 1: weight (1 + 1)^-1 = 0.5
    assert reply.accepted and "staleness 1" in reply.message
    v2, g2, up_b = await _train(client, "client-b", model, 2, 1.0)
    assert (await client.submit("client-b", model, v2, up_b, 5)).accepted
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    _, g3 = await client.download_vector("client-b", model, 3)
    g1 = (await client.download_vector("client-b", model, 1))[1]
    expected = g2 + (0.5 * 5 * (up_a - g1) + 5 * 1.0) / 10
    np.testing.assert_allclose(g3, expected, atol=1e-5)


async def test_an_update_staler_than_max_staleness_is_refused_failed_precondition(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=3, buffer_size=1, max_staleness=1, **ASYNC)
    client = stub_client(coord.port)
    model = await _join(client, "client-a", "client-b")
    v1, _, up_a = await _train(client, "client-a", model, 1, 1.0)
    for version in (1, 2):                                            # b alone makes versions 2 and 3
        v, _, up = await _train(client, "client-b", model, version, 0.0)
        assert (await client.submit("client-b", model, v, up, 5)).accepted
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit("client-a", model, v1, up_a, 5)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "trained on version 1 is 2 versions behind the current version 3; at most 1 accepted" in err.value.details()
    assert coord.engine.buffer.count == 0                             # nothing of it was folded


async def test_a_resent_update_is_a_duplicate_even_after_its_version_committed(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2, buffer_size=1, **ASYNC)
    client = stub_client(coord.port)
    model = await _join(client, "client-a", "client-b")
    v, _, up = await _train(client, "client-a", model, 1, 1.0)
    assert (await client.submit("client-a", model, v, up, 5)).accepted   # makes version 2
    again = await client.submit("client-a", model, v, up, 5)            # the acknowledgement was "lost"
    assert again.accepted and again.duplicate
    assert coord.engine.round == 2 and coord.engine.buffer.count == 0


# ---- a real `fedort coordinator serve --mode async` process, SIGKILLed ---------------------------

CLIENTS = ("client-0000", "client-0001", "client-0002")


def _local_update(cid: str, version: int, vector: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng([int(cid[-4:]), version])
    return (vector + 0.1 * rng.standard_normal(P_MLP)).astype(np.float32)


def _fit(server: CoordinatorProcess, cid: str, model: str, version: int) -> tuple[np.ndarray, pb.SubmitReply]:
    task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
    assert (task.kind, task.round) == (pb.Task.FIT, version), task
    return _send(server, cid, model, version, _download(server, cid, model, version))


def _download(server: CoordinatorProcess, cid: str, model: str, version: int) -> np.ndarray:
    parts = list(server.stub.DownloadVector(pb.VectorRequest(client_id=cid, model_id=model, round=version), timeout=10))
    return np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")


def _send(server, cid, model, version, vector) -> tuple[np.ndarray, pb.SubmitReply]:
    """Train from `vector` (version `version`'s global, as downloaded) and submit, naming that vector."""
    update = _local_update(cid, version, vector)
    trained_from = hashlib.sha256(vector.tobytes()).digest()
    parts = [pb.UpdatePart(header=update_header(cid, model, version, update, 10 * (1 + int(cid[-1])),
                                                trained_from=trained_from))]
    parts += [pb.UpdatePart(chunk=c) for c in chunks_of(update)]
    return vector, server.stub.SubmitUpdate(iter(parts), timeout=20)


def _expected(initial: np.ndarray, versions: int) -> np.ndarray:
    g = initial
    for v in range(1, versions + 1):
        n = {c: 10 * (1 + int(c[-1])) for c in CLIENTS}
        g = (g + sum(n[c] * (_local_update(c, v, g).astype(np.float64) - g) for c in CLIENTS) / sum(n.values()))
        g = g.astype(np.float32)
    return g


@pytest.mark.slow
def test_sigkill_with_acknowledged_buffered_updates_loses_none_and_counts_none_twice(mlp_artifacts, tmp_path):
    state, log = tmp_path / "state", tmp_path / "coordinator.log"
    flags = dict(mode="async", buffer_size=3, rounds=2, min_clients=1, client_timeout=0)
    server = CoordinatorProcess(mlp_artifacts, state, log, **flags)
    try:
        model = [server.stub.Join(pb.JoinRequest(client_id=c), timeout=10) for c in CLIENTS][0].model_id
        g1, first = _fit(server, CLIENTS[0], model, 1)
        assert first.accepted
        _, second = _fit(server, CLIENTS[1], model, 1)
        assert second.accepted
        server.kill()                                   # two of three acknowledged, in the spool only
        server = CoordinatorProcess(mlp_artifacts, state, log, **flags)
        again = _send(server, CLIENTS[0], model, 1, g1)[1]    # its acknowledgement might have been lost
        assert again.accepted and again.duplicate
        assert _fit(server, CLIENTS[2], model, 1)[1].accepted  # the third: version 2 is committed
        for cid in CLIENTS[:2]:
            assert _fit(server, cid, model, 2)[1].accepted
        server.kill()                                   # and again, mid-version 2
        server = CoordinatorProcess(mlp_artifacts, state, log, **flags)
        assert _fit(server, CLIENTS[2], model, 2)[1].accepted
        for cid in CLIENTS:
            task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
            assert task.kind == pb.Task.DONE
        assert server.proc.wait(20) == 0
    finally:
        server.kill()
    files = vector_files(state)
    final = np.frombuffer(files["round-0003.f32"], dtype="<f4")
    np.testing.assert_allclose(final, _expected(np.frombuffer(files["round-0001.f32"], dtype="<f4"), 2), atol=1e-6)


@pytest.mark.slow
async def test_status_reports_versions_the_staleness_histogram_and_throughput(start_coordinator, stub_client,
                                                                              tmp_path):
    from fedort.coordinator.status import format_status, offline_status

    coord = await start_coordinator(rounds=2, buffer_size=2, **ASYNC)
    client = stub_client(coord.port)
    model = await _join(client, "client-a", "client-b", "client-c")
    v1, _, up_a = await _train(client, "client-a", model, 1, 1.0)
    for cid in ("client-b", "client-c"):
        v, _, up = await _train(client, cid, model, 1, 0.0)
        await client.submit(cid, model, v, up, 5)
    await client.submit("client-a", model, v1, up_a, 5)                # staleness 1
    v2, _, up_b = await _train(client, "client-b", model, 2, 1.0)
    await client.submit("client-b", model, v2, up_b, 5)
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    text = format_status(offline_status(tmp_path / "state"))
    assert "async      2 versions committed from 4 updates; throughput" in text
    assert "staleness  0: 3, 1: 1  (versions behind: updates)" in text


def test_serve_flags_configure_async_mode_and_a_robust_strategy_is_refused_with_it(tmp_path):
    import argparse

    from fedort.cli import coordinator as coordinator_cli
    from fedort.coordinator import CoordinatorConfig
    from fedort.common.errors import ConfigError

    parser = argparse.ArgumentParser()
    coordinator_cli.register(parser.add_subparsers())
    args = parser.parse_args(["coordinator", "serve", "--artifacts", "a", "--state-dir", "s", "--mode", "async",
                              "--buffer-size", "5", "--max-staleness", "3", "--staleness-weight", "hinge:1,2"])
    config = coordinator_cli.config_from_args(args)
    assert (config.fedbuff.mode, config.fedbuff.buffer_size, config.fedbuff.max_staleness, config.fedbuff.staleness_weight) == ("async", 5, 3, "hinge:1,2")
    with pytest.raises(ConfigError, match="mode 'async' folds updates into FedBuff's buffer .*strategy must be 'fedavg', "
                                          "got 'median'"):
        CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path, mode="async", strategy="median"))
