"""edge_client.transport: the device's channel, typed calls, deadlines and cancellation."""

from __future__ import annotations

import asyncio
import threading

import grpc
import numpy as np
import pytest

from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.server import Coordinator
from fedort.common.errors import ConfigError, FedortError, ProtocolError
from fedort.protos.messages import TaskKind
from fedort.ort.artifacts import build_artifacts
from fedort.ort.models import mlp
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlp")
    build_artifacts(mlp(), folder)
    return folder


@pytest.fixture
def address(tmp_path, artifacts):
    """A coordinator waiting for 2 clients (so one client's long-poll is held), on its own loop thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    holder = {}

    async def start():
        holder["c"] = Coordinator(CoordinatorConfig.from_mapping(dict(artifacts=artifacts, state_dir=tmp_path / "state",
                                                    address="127.0.0.1:0", rounds=1, min_clients=2,
                                                    insecure=True, auth="open")))
        return await holder["c"].start()

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    yield f"127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(holder["c"].stop(0), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.mark.parametrize("bad", ["localhost", ":7420", "host:port", ""])
def test_addresses_must_be_host_and_port(bad):
    with pytest.raises(ConfigError, match="HOST:PORT"):
        ChannelConfig(bad)


def test_tls_is_the_default_and_its_files_must_exist(tmp_path):
    assert ChannelConfig("127.0.0.1:7420").insecure is False
    with pytest.raises(ConfigError, match="ca_file not found"):
        ChannelConfig("127.0.0.1:7420", ca_file=tmp_path / "missing.pem")


def test_keepalive_and_message_limits_are_set_on_the_channel():
    options = dict(ChannelConfig("127.0.0.1:7420").options())
    assert options["grpc.keepalive_time_ms"] == 60_000 and options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.max_receive_message_length"] > 4 << 20  # above the largest chunk a server may send


@pytest.mark.slow
def test_join_and_download_the_round_vector(address):
    with Transport.connect(address, insecure=True) as t:
        info = t.join("dev")
        assert info.client_id.startswith("c-") and len(info.artifacts) == 4
        assert all(len(a.sha256) == 64 for a in info.artifacts)
        task = t.poll(info.client_id, info.model_id, wait_ms=0)
        assert task.kind == TaskKind.WAIT          # alone, below min_clients
        vector = t.download_vector(info.client_id, info.model_id, 1)
        assert vector.dtype == np.float32 and vector.ndim == 1 and vector.size == 9610


def test_a_vector_that_is_not_the_announced_one_is_refused(address):
    with Transport.connect(address, insecure=True) as t:
        info = t.join("dev")
        with pytest.raises(ProtocolError, match="differs from the task's"):
            t.download_vector(info.client_id, info.model_id, 1, expected_sha256=b"\x00" * 32)


def test_errors_arrive_as_fedort_errors_with_the_status_code(address):
    with Transport.connect(address, insecure=True) as t:
        with pytest.raises(FedortError) as info:
            t.poll("c-never-joined", "m", wait_ms=0)
        assert info.value.code == "NOT_FOUND" and "unknown client" in str(info.value)


@pytest.mark.slow
def test_cancel_inflight_interrupts_a_long_poll(address):
    with Transport.connect(address, insecure=True) as t:
        info = t.join("dev")
        threading.Timer(0.3, t.cancel_inflight).start()
        with pytest.raises(FedortError) as err:
            t.poll(info.client_id, info.model_id, wait_ms=20_000)
        assert err.value.code == "CANCELLED"   # a hold that ran out would answer WAIT


@pytest.mark.slow
def test_a_non_cancellable_transport_makes_the_same_calls(address):
    with Transport(ChannelConfig(address, insecure=True), cancellable=False) as t:
        info = t.join("dev")
        assert t.poll(info.client_id, info.model_id, wait_ms=0).kind == TaskKind.WAIT
        round, state, tasks = t.poll_tasks([info.client_id], info.model_id, wait_ms=0)
        assert (round, tasks) == (1, {}) and state.name == "WAITING_FOR_CLIENTS"
        with pytest.raises(FedortError) as err:
            t.poll(info.client_id, "f" * 64, wait_ms=0)
        assert err.value.code == "FAILED_PRECONDITION"


def test_a_coordinator_without_poll_tasks_answers_unimplemented():
    """What a worker meets at a coordinator older than PollTasks (it then polls client by client)."""
    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Transport(ChannelConfig(f"127.0.0.1:{port}", insecure=True, rpc_timeout_s=10), cancellable=False) as t:
            with pytest.raises(FedortError) as err:
                t.poll_tasks(["c-1"], "m", wait_ms=0)
        assert err.value.code == "UNIMPLEMENTED"
    finally:
        server.stop(0)


class Relay:
    """A loopback TCP relay to `target`, both ways. With `silent_first` its first connection is accepted and
    then never answered (a half-open peer: nothing sent, nothing reset). `stall(i)` makes connection i drop
    whatever it receives from then on (a peer that went silent). `ended[i]` is set once the device closed
    connection i."""

    def __init__(self, target: str, silent_first: bool = False) -> None:
        import socket

        self.target = target.rsplit(":", 1)
        self.silent_first = silent_first
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list = []
        self.ended: list[threading.Event] = []
        self.stalled: list[threading.Event] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            self.ended.append(ended := threading.Event())
            self.stalled.append(stalled := threading.Event())
            if self.silent_first and len(self.connections) == 1:
                continue                                    # held open, never answered
            upstream = socket.create_connection((self.target[0], int(self.target[1])))
            self.connections.append(upstream)
            threading.Thread(target=self._pipe, args=(conn, upstream, stalled, ended), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, conn, stalled, None), daemon=True).start()

    def stall(self, i: int) -> None:
        self.stalled[i].set()

    @staticmethod
    def _pipe(src, dst, stalled: threading.Event, ended: threading.Event | None) -> None:
        try:
            while data := src.recv(65536):
                if not stalled.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        if ended is not None:
            ended.set()
            dst.close()

    def close(self) -> None:
        self.listener.close()
        for c in self.connections:
            c.close()


@pytest.mark.slow
def test_a_call_that_runs_out_of_time_redials_instead_of_reusing_a_silent_connection(address):
    relay = Relay(address, silent_first=True)
    try:
        with Transport.connect(f"127.0.0.1:{relay.port}", insecure=True, rpc_timeout_s=1.0) as t:
            with pytest.raises(FedortError) as e:
                t.join("dev")                               # sent into the silent connection
            assert e.value.code == "DEADLINE_EXCEEDED"
            assert t.join("dev").client_id.startswith("c-")  # a new connection, relayed to the coordinator
    finally:
        relay.close()


@pytest.mark.slow
def test_a_connection_left_behind_by_a_redial_is_closed_once_its_calls_ended(address):
    relay = Relay(address)
    try:
        with Transport.connect(f"127.0.0.1:{relay.port}", insecure=True, rpc_timeout_s=10) as t:
            client_id = t.join("dev").client_id                # connection 0, healthy ...
            relay.stall(0)                                      # ... until it goes silent
            with pytest.raises(FedortError) as e:
                t.heartbeat(client_id, timeout_s=1.0)           # runs out of time: later calls use a new connection
            assert e.value.code == "DEADLINE_EXCEEDED"
            assert relay.ended[0].wait(10)                      # ... and the old one is closed, not kept until close()
            assert t.heartbeat(client_id)[0] >= 0
            assert not relay.ended[1].is_set()
    finally:
        relay.close()
