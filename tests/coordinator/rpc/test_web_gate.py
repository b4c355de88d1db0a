"""The web port refuses before it reads: oversized declared bodies, bad tokens and extra token-less Joins are
answered at once (the test never sends the body), and a chunked body that grows past its method's limit ends
RESOURCE_EXHAUSTED; raw HTTP/1.1 over 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

pytest.importorskip("connectrpc", reason="the web port needs the fedort[web] extra")

from coordinator_fixtures import mlp_artifacts, start_coordinator  # noqa: E402,F401
from fedort.coordinator.rpc.devices import DeviceStore  # noqa: E402
from fedort.protos.stubs import fedort_v1_pb2 as pb  # noqa: E402

TIMEOUT_S = 15


@pytest.fixture
async def web(tmp_path, start_coordinator):  # noqa: F811
    state = tmp_path / "state"
    token = DeviceStore(state).enroll("client-a")[1]
    coord = await start_coordinator(auth="token", rounds=1, min_clients=1, state_dir=state,
                                    web_address="127.0.0.1:0", unauthenticated_calls=1)
    return coord, token


def _headers(method: str, length: int | None, token: str | None = None, chunked: bool = False) -> bytes:
    lines = [f"POST /fedort.v1.Coordinator/{method} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/proto"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket) -> tuple[int, dict]:
    """The status and the JSON error body of the reply (read until the server closes or the body is complete)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lines = [line.lower() for line in head.split(b"\r\n")]
    if b"transfer-encoding: chunked" in lines:   # read to the last chunk, then join the chunks' data
        while not body.endswith(b"0\r\n\r\n") and (chunk := sock.recv(65536)):
            body += chunk
        data, body = body, b""
        while (size := int(data.split(b"\r\n", 1)[0], 16)) > 0:
            data = data.split(b"\r\n", 1)[1]
            body, data = body + data[:size], data[size + 2 :]
    else:
        length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length")), 0)
        while len(body) < length and (chunk := sock.recv(65536)):
            body += chunk
    return status, json.loads(body) if b"content-type: application/json" in lines else {"body": body}


def _call(port: int, request: bytes, then: bytes = b"") -> tuple[int, dict]:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(request)
        if then:
            try:
                sock.sendall(then)
            except OSError:   # the server may have answered and closed while this was still sending
                pass
        return _answer(sock)


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(web):
    coord, _ = web
    status, error = await asyncio.to_thread(_call, coord.web_port, _headers("Join", 8 << 20))
    assert status == 429 and error["code"] == "resource_exhausted"
    assert "Join takes requests of at most" in error["message"] and "Content-Length 8388608" in error["message"]


async def test_a_forged_token_is_refused_before_the_body_is_read(web):
    coord, _ = web
    status, error = await asyncio.to_thread(_call, coord.web_port, _headers("Heartbeat", 1000, token="forged"))
    assert status == 401 and error["code"] == "unauthenticated"


async def test_a_second_token_less_join_is_refused_while_one_holds_the_only_slot(web):
    coord, _ = web
    held = socket.create_connection(("127.0.0.1", coord.web_port), timeout=TIMEOUT_S)
    try:
        held.sendall(_headers("Join", 100))   # its body never comes: the call holds the one slot
        deadline = asyncio.get_running_loop().time() + TIMEOUT_S
        status, error = 0, {}
        while asyncio.get_running_loop().time() < deadline:
            status, error = await asyncio.to_thread(_call, coord.web_port, _headers("Join", 100), b"\0" * 100)
            if status == 429:
                break
            await asyncio.sleep(0.05)   # the held call may not have reached the gate yet
        assert status == 429 and "Join calls without a token are already in progress" in error["message"]
    finally:
        held.close()


async def test_a_chunked_body_growing_past_the_limit_ends_resource_exhausted(web):
    coord, token = web
    part = b"\0" * 65536
    body = b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n" for _ in range(6)) + b"0\r\n\r\n"
    status, error = await asyncio.to_thread(_call, coord.web_port, _headers("Heartbeat", None, token, chunked=True),
                                            body)
    assert status == 429 and error["code"] == "resource_exhausted" and "grew past it" in error["message"]


async def test_an_honest_small_call_with_a_token_passes_the_gate(web):
    coord, token = web
    status, reply = await asyncio.to_thread(_call, coord.web_port, _headers("Status", 0, token))
    assert status == 200, reply
    assert pb.StatusReply.FromString(reply["body"]).total_rounds == 1
