"""Mutual TLS with device tokens: a call's client certificate must name the client id its token authenticates.

Real coordinators on 127.0.0.1:0 with a throwaway CA (tls_fixtures); calls from raw stubs with their own
certificates, and one real edge client training a round.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from cryptography import x509

from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts, start_coordinator  # noqa: F401
from fedort.common.errors import ConfigError
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.coordinator.rpc.peer_certificate import PeerCertificate
from fedort.edge_client.client.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.transport.retry import Backoff
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from test_tls import digits_part
from tls_fixtures import issue_client, pki  # noqa: F401


@pytest.fixture
def devices(tmp_path):
    """The state dir with alice and bob enrolled: (state dir, {client id: token})."""
    state = tmp_path / "state"
    store = DeviceStore(state)
    return state, {cid: store.enroll(cid)[1] for cid in ("alice", "bob")}


def mutual(pki, **overrides) -> dict:  # noqa: F811
    return {**dict(insecure=False, tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca,
                   auth="token"), **overrides}


def channel(port: int, pki, cert=None) -> grpc.aio.Channel:  # noqa: F811
    """A channel trusting the test CA, presenting `cert` ((certificate, key) files) if given."""
    key, chain = (cert[1].read_bytes(), cert[0].read_bytes()) if cert else (None, None)
    credentials = grpc.ssl_channel_credentials(pki.ca.read_bytes(), key, chain)
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def test_a_certificate_for_alice_with_bobs_token_is_unauthenticated_naming_both(
        tmp_path, pki, devices, start_coordinator):  # noqa: F811
    state, tokens = devices
    coord = await start_coordinator(state_dir=state, **mutual(pki))
    alice = issue_client(pki, tmp_path / "certs", "alice")
    async with channel(coord.port, pki, alice) as ch:
        stub = pb_grpc.CoordinatorStub(ch)
        for call in (stub.Join(pb.JoinRequest(client_id="bob"), metadata=bearer(tokens["bob"]), timeout=RPC_TIMEOUT),
                     stub.Join(pb.JoinRequest(credential=tokens["bob"]), timeout=RPC_TIMEOUT),
                     stub.Heartbeat(pb.HeartbeatRequest(client_id="bob"), metadata=bearer(tokens["bob"]),
                                    timeout=RPC_TIMEOUT)):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "the client certificate names subject CN 'alice', but the token is client bob's" in e.value.details()
            assert "present the certificate issued for bob" in e.value.details()
    assert coord.engine.store.clients() == []


async def test_an_upload_with_another_devices_certificate_is_refused_before_its_header_is_read(
        tmp_path, pki, devices, start_coordinator):  # noqa: F811
    state, tokens = devices
    coord = await start_coordinator(state_dir=state, **mutual(pki))
    async with channel(coord.port, pki, issue_client(pki, tmp_path / "certs", "alice")) as ch:
        call = pb_grpc.CoordinatorStub(ch).SubmitUpdate(metadata=bearer(tokens["bob"]), timeout=RPC_TIMEOUT)
        assert await call.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "but the token is client bob's" in await call.details()


@pytest.mark.parametrize("names", [
    ("bob", []),
    ("device 17", [x509.DNSName("bob")]),
    ("", [x509.UniformResourceIdentifier("urn:x"), x509.DNSName("bob")]),
], ids=["subject CN", "DNS subjectAltName", "no CN, second subjectAltName"])
async def test_a_certificate_naming_the_tokens_client_id_is_served(
        tmp_path, pki, devices, start_coordinator, names):  # noqa: F811
    state, tokens = devices
    coord = await start_coordinator(state_dir=state, **mutual(pki))
    async with channel(coord.port, pki, issue_client(pki, tmp_path / "certs", *names)) as ch:
        reply = await pb_grpc.CoordinatorStub(ch).Join(pb.JoinRequest(device_name="phone"),
                                                       metadata=bearer(tokens["bob"]), timeout=RPC_TIMEOUT)
    assert reply.client_id == "bob"


@pytest.mark.slow
async def test_edge_clients_with_their_own_certificates_and_tokens_train_a_round(
        tmp_path, pki, devices, start_coordinator):  # noqa: F811
    state, tokens = devices
    coord = await start_coordinator(state_dir=state, rounds=1, **mutual(pki))
    fast = Backoff(initial_s=0.05, max_delay_s=0.2, give_up_after_s=5.0)

    def run(i: int, cid: str):
        cert, key = issue_client(pki, tmp_path / "certs", cid)
        config = EdgeConfig(f"127.0.0.1:{coord.port}", ca_file=pki.ca, cert_file=cert, key_file=key,
                            token=tokens[cid], name=cid, cache_dir=tmp_path / f"cache-{cid}", poll_wait_ms=2000,
                            heartbeats=False, backoff=fast)
        return EdgeClient(config, data=digits_part(i, 2)).run()

    summaries = await asyncio.wait_for(
        asyncio.gather(*(asyncio.to_thread(run, i, cid) for i, cid in enumerate(tokens))), 120)
    assert sorted((s.client_id, s.rounds_trained) for s in summaries) == [("alice", [1]), ("bob", [1])]
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state.name == "DONE" and outcome.rounds_completed == 1


async def test_with_the_binding_off_any_certificate_of_the_ca_carries_any_token(
        tmp_path, pki, devices, start_coordinator):  # noqa: F811
    state, tokens = devices
    coord = await start_coordinator(state_dir=state, **mutual(pki, tls_bind_client_id=False))
    async with channel(coord.port, pki, issue_client(pki, tmp_path / "certs", "alice")) as ch:
        reply = await pb_grpc.CoordinatorStub(ch).Join(pb.JoinRequest(), metadata=bearer(tokens["bob"]),
                                                       timeout=RPC_TIMEOUT)
    assert reply.client_id == "bob"


async def test_tls_without_client_certificates_takes_tokens_alone(pki, devices, start_coordinator):  # noqa: F811
    state, tokens = devices
    coord = await start_coordinator(state_dir=state, **mutual(pki, tls_client_ca=None))
    async with channel(coord.port, pki) as ch:
        reply = await pb_grpc.CoordinatorStub(ch).Join(pb.JoinRequest(), metadata=bearer(tokens["bob"]),
                                                       timeout=RPC_TIMEOUT)
    assert reply.client_id == "bob"


async def test_mutual_tls_with_open_auth_binds_nothing(tmp_path, pki, start_coordinator):  # noqa: F811
    coord = await start_coordinator(**mutual(pki, auth="open"))
    async with channel(coord.port, pki, issue_client(pki, tmp_path / "certs", "alice")) as ch:
        reply = await pb_grpc.CoordinatorStub(ch).Join(pb.JoinRequest(client_id="bob"), timeout=RPC_TIMEOUT)
    assert reply.client_id == "bob"


async def test_a_web_port_beside_bound_mutual_tls_is_refused_before_the_state_dir_is_touched(
        tmp_path, pki, start_coordinator):  # noqa: F811
    with pytest.raises(ConfigError, match="the web port cannot tell which client certificate.*--no-tls-bind-client-id"):
        await start_coordinator(state_dir=tmp_path / "fresh", web_address="127.0.0.1:0", **mutual(pki))
    assert not (tmp_path / "fresh").exists()


def test_a_refusal_quotes_at_most_four_alternative_names():
    many = PeerCertificate("", tuple(f"name-{i}" for i in range(9)))
    assert many.describe() == "subjectAltName 'name-0', 'name-1', 'name-2', 'name-3' and 5 more"
    assert PeerCertificate("", ()).describe() == "no subject CN and no subjectAltName"


@pytest.mark.parametrize("flags, bound", [([], True), (["--no-tls-bind-client-id"], False),
                                          (["--tls-bind-client-id"], True)])
def test_the_serve_flag_sets_the_binding_and_it_is_on_by_default(flags, bound):
    import argparse

    from fedort.cli.coordinator import config_from_args, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["coordinator", "serve", "--artifacts", "a", "--state-dir", "s", *flags])
    assert config_from_args(args).transport.tls_bind_client_id is bound


async def test_an_edge_client_with_another_devices_certificate_stops_saying_which_names_disagree(
        tmp_path, pki, devices, start_coordinator):  # noqa: F811
    from fedort.common.errors import UnauthenticatedError

    state, tokens = devices
    coord = await start_coordinator(state_dir=state, **mutual(pki))
    cert, key = issue_client(pki, tmp_path / "certs", "alice")
    config = EdgeConfig(f"127.0.0.1:{coord.port}", ca_file=pki.ca, cert_file=cert, key_file=key,
                        token=tokens["bob"], name="bob", cache_dir=tmp_path / "cache", heartbeats=False,
                        backoff=Backoff(initial_s=0.05, max_delay_s=0.2, give_up_after_s=5.0))
    with pytest.raises(UnauthenticatedError, match="the client certificate names subject CN 'alice', but the token "
                                                   "is client bob's"):
        await asyncio.wait_for(asyncio.to_thread(EdgeClient(config, data=digits_part(0, 2)).run), 60)
