"""The web port over real HTTP on 127.0.0.1: connect-python's own client (Connect binary and JSON, gRPC-Web)
runs a device's round through the gRPC port's servicer: join, poll, download, resumable upload, commit; the
same token checks and codes; CORS preflights from origins not allowed are refused; the page is served at /."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import ssl

import numpy as np
import pytest

pytest.importorskip("connectrpc", reason="the web port needs the fedort[web] extra")

from connectrpc.protocol import ProtocolType  # noqa: E402
from connectrpc.code import Code  # noqa: E402
from connectrpc.errors import ConnectError  # noqa: E402

from coordinator_fixtures import mlp_artifacts, start_coordinator, update_header  # noqa: E402,F401
from tls_fixtures import pki  # noqa: E402,F401
from fedort.coordinator.devices import DeviceStore  # noqa: E402
from fedort.protos import fedort_v1_pb2 as pb  # noqa: E402
from fedort.protos.fedort_v1_connect import CoordinatorClient  # noqa: E402

TIMEOUT_MS = 15_000


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
async def web(tmp_path, start_coordinator):
    """A token-auth coordinator (1 round, 1 client) with its web port; tokens of client-a and client-b."""
    state = tmp_path / "state"
    store = DeviceStore(state)
    tokens = {cid: store.enroll(cid)[1] for cid in ("client-a", "client-b")}
    page = tmp_path / "page"
    page.mkdir()
    (page / "index.html").write_text("<title>fedort</title>")
    coord = await start_coordinator(auth="token", rounds=1, min_clients=1, state_dir=state, web_address="127.0.0.1:0",
                                    web_page=page, web_cors_origins=("https://allowed.example",))
    return coord, tokens, store


def client(coord, protocol=ProtocolType.CONNECT, proto_json=False) -> CoordinatorClient:
    return CoordinatorClient(f"http://127.0.0.1:{coord.web_port}", protocol=protocol, proto_json=proto_json,
                             timeout_ms=TIMEOUT_MS)


async def committed(coord) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while coord.engine.global_vector.round < 2:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, "round 1 did not commit"
        await coord.engine.wait_change(min(left, 0.5))


@pytest.mark.parametrize("protocol, proto_json", [(ProtocolType.CONNECT, False), (ProtocolType.CONNECT, True),
                                                  (ProtocolType.GRPC_WEB, False)])
async def test_a_web_device_runs_a_round_over_http(web, protocol, proto_json):
    coord, tokens, _ = web
    auth = bearer(tokens["client-a"])
    c = client(coord, protocol, proto_json)
    join = await c.join(pb.JoinRequest(client_id="client-a", capabilities={"runtime": "web", "codecs": "raw"}),
                        headers=auth)
    artifact = join.artifacts[0]
    parts = [p async for p in c.download_artifact(pb.ArtifactRequest(client_id="client-a", model_id=join.model_id,
                                                                      name=artifact.name), headers=auth)]
    assert parts[0].header == artifact
    assert hashlib.sha256(b"".join(p.chunk for p in parts[1:])).digest() == artifact.sha256
    task = await c.poll_task(pb.PollRequest(client_id="client-a", model_id=join.model_id, wait_ms=5000), headers=auth)
    assert task.kind == pb.Task.FIT
    header, chunks = None, []
    async for p in c.download_vector(pb.VectorRequest(client_id="client-a", model_id=join.model_id, round=task.round),
                                     headers=auth):
        if p.WhichOneof("part") == "header":
            header = p.header
        else:
            chunks.append(p.chunk)
    payload = b"".join(chunks)
    assert hashlib.sha256(payload).digest() == header.sha256 == task.vector_sha256
    update = np.frombuffer(payload, "<f4") + np.float32(0.5)
    raw = update.astype("<f4").tobytes()
    state = await c.begin_upload(pb.BeginUploadRequest(header=update_header(
        "client-a", join.model_id, task.round, update, 9, trained_from=task.vector_sha256)), headers=auth)
    while state.offset < len(raw):
        data = raw[state.offset:state.offset + state.max_part_bytes]
        state = await c.put_upload_part(pb.UploadPartRequest(client_id="client-a", upload_id=state.upload_id,
                                                             offset=state.offset, data=data,
                                                             sha256=hashlib.sha256(data).digest()), headers=auth)
    reply = await c.commit_upload(pb.UploadRef(client_id="client-a", upload_id=state.upload_id), headers=auth)
    assert reply.accepted and not reply.duplicate
    await committed(coord)
    np.testing.assert_array_equal(coord.engine.global_vector.vector, update)


async def expect(code: Code, call) -> str:
    with pytest.raises(ConnectError) as e:
        await call
    assert e.value.code == code, e.value.message
    return e.value.message


async def test_calls_without_a_valid_token_are_unauthenticated(web):
    coord, tokens, store = web
    c = client(coord)
    poll = lambda headers: c.poll_task(pb.PollRequest(client_id="client-a", wait_ms=0), headers=headers)  # noqa: E731
    assert "requires a device token" in await expect(Code.UNAUTHENTICATED, poll({}))
    forged = tokens["client-a"][:-4] + "AAAA"
    await expect(Code.UNAUTHENTICATED, poll(bearer(forged)))
    store.revoke("client-b")
    await expect(Code.UNAUTHENTICATED, poll(bearer(tokens["client-b"])))
    value = coord.monitoring.registry.get_sample_value("fedort_rpc_errors_total",
                                                       {"method": "PollTask", "code": "UNAUTHENTICATED"})
    assert value == 3   # the gRPC port's own counters


async def test_a_token_naming_another_device_is_permission_denied(web):
    coord, tokens, _ = web
    c = client(coord)
    await c.join(pb.JoinRequest(client_id="client-a"), headers=bearer(tokens["client-a"]))
    await expect(Code.PERMISSION_DENIED, c.heartbeat(pb.HeartbeatRequest(client_id="client-a"),
                                                     headers=bearer(tokens["client-b"])))


def preflight(port: int, origin: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("OPTIONS", "/fedort.v1.Coordinator/Join", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,connect-protocol-version"})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


async def test_a_cors_preflight_from_an_origin_not_allowed_is_refused(web):
    coord, _, _ = web
    refused = await asyncio.to_thread(preflight, coord.web_port, "https://evil.example")
    assert refused.status == 400 and refused.getheader("access-control-allow-origin") is None
    allowed = await asyncio.to_thread(preflight, coord.web_port, "https://allowed.example")
    assert allowed.status == 200 and allowed.getheader("access-control-allow-origin") == "https://allowed.example"
    assert "authorization" in allowed.getheader("access-control-allow-headers").lower()


async def test_the_page_is_served_at_the_root(web):
    coord, _, _ = web

    def get() -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", coord.web_port, timeout=10)
        conn.request("GET", "/")
        r = conn.getresponse()
        return r.status, r.read()

    assert await asyncio.to_thread(get) == (200, b"<title>fedort</title>")


def connect_json(port: int, method: str, body: bytes, context: ssl.SSLContext) -> tuple[int, bytes]:
    """A Connect unary call as plain HTTP (JSON codec) over TLS."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    conn.request("POST", f"/fedort.v1.Coordinator/{method}", body=body,
                 headers={"Content-Type": "application/json", "Connect-Protocol-Version": "1"})
    r = conn.getresponse()
    out = (r.status, r.read())
    conn.close()
    return out


async def test_the_web_port_serves_tls_with_the_grpc_ports_certificate(tmp_path, start_coordinator, pki):
    coord = await start_coordinator(insecure=False, tls_cert=pki.server_cert, tls_key=pki.server_key,
                                    web_address="127.0.0.1:0")
    trusted = ssl.create_default_context(cafile=str(pki.ca))
    status, body = await asyncio.to_thread(connect_json, coord.web_port, "Status", b"{}", trusted)
    assert status == 200 and json.loads(body)["modelId"] == coord.engine.model_id
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncio.to_thread(connect_json, coord.web_port, "Status", b"{}",
                                ssl.create_default_context(cafile=str(pki.other_ca)))


def test_without_the_web_extra_the_error_names_it():
    """An environment without connect-python (its import blocked in a fresh interpreter)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['connectrpc'] = None\n"
            "from fedort.protos.errors import ConfigError\n"
            "try:\n    import fedort.coordinator.web_transport\nexcept ConfigError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == ("--web-address needs the web extra (connectrpc is missing): "
                                  "pip install 'fedort[web]'"), out.stderr
