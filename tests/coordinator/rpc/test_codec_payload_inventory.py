"""Malformed update payloads of every codec family over the wire, from a client built from the .proto alone:
each is INVALID_ARGUMENT saying what was expected and leaves the state dir as it was, and after all of them
a round of honest updates commits exactly the FedAvg of those updates.

One coordinator serves the per-case tests (alice and bob selected for round 1, every codec allowed);
the last test sends every case to a fresh coordinator of its own before the honest round, so it holds
whichever worker ran which case. The parametrize ids are the inventory: `<codec>: <what is wrong>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
import pytest_asyncio
import zstandard

from coordinator_fixtures import P_MLP, mlp_artifacts  # noqa: F401
from fedort.coordinator.aggregation import FedAvg, Update
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_codecs import get_codec
from test_bad_input_inventory import Target, chunks, header, serving
from zstd_frames import rle_bomb

pytestmark = pytest.mark.asyncio(loop_scope="module")

ANNOUNCED = {"alice": {"examples": "100"}, "bob": {"examples": "100"}}
CONFIG = dict(rounds=1, min_clients=2)
RAW_BYTES = 4 * P_MLP


def delta(seed: int = 0) -> np.ndarray:
    """A plausible update delta (what devices send for every codec but raw)."""
    return (0.01 * np.random.default_rng(seed).standard_normal(P_MLP)).astype(np.float32)


def whole(spec: str) -> bool:
    """Whether codec `spec` carries the update itself (raw, zstd+raw), not its difference from the global."""
    return spec.rsplit("+", 1)[-1] == "raw"


def encode(t: Target, spec: str, seed: int = 0) -> bytes:
    if spec == "raw":
        return (t.vector + delta(seed)).astype("<f4").tobytes()
    return get_codec(spec).encode(delta(seed), np.random.default_rng(seed))


def parts(t: Target, spec: str, payload: bytes, *, codec: str | None = None, payload_bytes: int | None = None,
          sha256: bytes | None = None, base_sha256: bytes | None = None) -> list[bytes]:
    """Alice's update stream of `payload` in codec `spec`, the header describing it honestly unless told."""
    h = header(t, codec=codec or spec, payload_bytes=len(payload) if payload_bytes is None else payload_bytes,
               sha256=hashlib.sha256(payload).digest() if sha256 is None else sha256,
               base_sha256=(b"" if whole(spec) else t.trained_from) if base_sha256 is None else base_sha256)
    return [pb.UpdatePart(header=h).SerializeToString(), *chunks(payload)]


def patched(payload: bytes, at: int, new: bytes) -> bytes:
    return payload[:at] + new + payload[at + len(new):]


def pairs(indices, values=None) -> bytes:
    """A topk payload: (uint32 index, float32 value) pairs."""
    records = np.empty(len(indices), dtype=[("i", "<u4"), ("v", "<f4")])
    records["i"] = indices
    records["v"] = 0.5 if values is None else values
    return records.tobytes()


TOPK = "topk:0.01"
K = int(np.ceil(0.01 * P_MLP))   # pairs of a topk:0.01 payload for this model
HONEST_INDICES = np.arange(0, 10 * K, 10)


def topk(indices=None, values=None) -> bytes:
    return pairs(HONEST_INDICES if indices is None else indices, values)


def zstd(inner: bytes, **options) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True, **options).compress(inner)


def corrupted(frame: bytes) -> bytes:
    """`frame` with every 97th byte of its body flipped."""
    body = bytearray(frame)
    for i in range(40, len(body) - 8, 97):
        body[i] ^= 0x5A
    return bytes(body)


def unsized_zstd(inner: bytes) -> bytes:
    c = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    return c.compress(inner) + c.flush()


@dataclass(frozen=True)
class Case:
    stream: Callable[[Target], list[bytes]]
    says: str                    # a regular expression the INVALID_ARGUMENT message matches


def _cases() -> dict[str, Case]:
    int8 = lambda t: encode(t, "int8")  # noqa: E731
    fp16 = lambda t: encode(t, "fp16")  # noqa: E731
    bf16 = lambda t: encode(t, "bf16")  # noqa: E731
    raw = lambda t: encode(t, "raw")  # noqa: E731
    zint8 = lambda t: encode(t, "zstd+int8")  # noqa: E731
    scale = lambda value: lambda t: parts(t, "int8", patched(int8(t), 260, np.float32(value).tobytes()))  # noqa: E731
    return {
        # ---- raw ----
        "raw: one value short": Case(lambda t: parts(t, "raw", raw(t)[:-4], payload_bytes=0),
                                     rf"raw update of alice ended after {RAW_BYTES - 4} of {RAW_BYTES} bytes"),
        "raw: payload_bytes one value short": Case(lambda t: parts(t, "raw", raw(t)[:-4]),
                                                   rf"raw payload for {P_MLP} values must be {RAW_BYTES} bytes, "
                                                   rf"header says {RAW_BYTES - 4}"),
        "raw: one value long": Case(lambda t: parts(t, "raw", raw(t) + b"\0" * 4, payload_bytes=0),
                                    rf"carries more than the {RAW_BYTES} bytes its header declares"),
        "raw: +inf": Case(lambda t: parts(t, "raw", patched(raw(t), 40, np.float32(np.inf).tobytes())),
                          r"non-finite value \(inf\) at position 10"),
        "raw: -inf": Case(lambda t: parts(t, "raw", patched(raw(t), 40, np.float32(-np.inf).tobytes())),
                          r"non-finite value \(-inf\) at position 10"),
        "raw: as a delta": Case(lambda t: parts(t, "raw", raw(t), base_sha256=t.trained_from),
                                r"codec raw carries the update itself; base_sha256 must be empty"),
        # ---- fp16 ----
        "fp16: payload_bytes one value short": Case(lambda t: parts(t, "fp16", fp16(t), payload_bytes=2 * P_MLP - 2),
                                                    rf"fp16 payload for {P_MLP} values must be {2 * P_MLP} bytes, "
                                                    rf"header says {2 * P_MLP - 2}"),
        "fp16: stream ends early": Case(lambda t: parts(t, "fp16", fp16(t)[:-2], payload_bytes=2 * P_MLP),
                                        rf"ended after {2 * P_MLP - 2} of {2 * P_MLP} bytes"),
        "fp16: stream runs long": Case(lambda t: parts(t, "fp16", fp16(t) + b"\0\0", payload_bytes=2 * P_MLP),
                                       rf"fp16 update of alice carries more than the {2 * P_MLP} bytes its header declares"),
        "fp16: NaN": Case(lambda t: parts(t, "fp16", patched(fp16(t), 8, np.float16(np.nan).tobytes())),
                          r"fp16 payload contains a non-finite value \(nan\) at position 4"),
        "fp16: +inf": Case(lambda t: parts(t, "fp16", patched(fp16(t), 8, np.float16(np.inf).tobytes())),
                           r"fp16 payload contains a non-finite value \(inf\) at position 4"),
        "fp16: delta against another vector": Case(lambda t: parts(t, "fp16", fp16(t), base_sha256=b"\7" * 32),
                                                   r"header base_sha256 and trained_from_sha256 name different vectors"),
        "fp16: base_sha256 of 5 bytes": Case(lambda t: parts(t, "fp16", fp16(t), base_sha256=b"\7" * 5),
                                             r"base_sha256 must be empty or 32 bytes"),
        "fp16: no base_sha256": Case(lambda t: parts(t, "fp16", fp16(t), base_sha256=b""),
                                     r"codec fp16 encodes the difference from the round's global vector; the "
                                     r"header's base_sha256 must name it \([0-9a-f]{16}…\), it is empty"),
        "fp16: payload sha256 of other bytes": Case(lambda t: parts(t, "fp16", fp16(t),
                                                                    sha256=hashlib.sha256(b"x").digest()),
                                                    r"vector sha256 mismatch: header says [0-9a-f]{16}…, received "
                                                    r"bytes hash to [0-9a-f]{16}…"),
        # ---- bf16 ----
        "bf16: payload_bytes one value long": Case(lambda t: parts(t, "bf16", bf16(t), payload_bytes=2 * P_MLP + 2),
                                                   rf"bf16 payload for {P_MLP} values must be {2 * P_MLP} bytes, "
                                                   rf"header says {2 * P_MLP + 2}"),
        "bf16: NaN": Case(lambda t: parts(t, "bf16", patched(bf16(t), 8, b"\xc0\x7f")),
                          r"bf16 payload contains a non-finite value \(nan\) at position 4"),
        "bf16: +inf": Case(lambda t: parts(t, "bf16", patched(bf16(t), 8, b"\x80\x7f")),
                           r"bf16 payload contains a non-finite value \(inf\) at position 4"),
        "bf16: stream ends early": Case(lambda t: parts(t, "bf16", bf16(t)[:-1], payload_bytes=2 * P_MLP),
                                        rf"ended after {2 * P_MLP - 1} of {2 * P_MLP} bytes"),
        # ---- int8 ----
        "int8: NaN scale": Case(scale(np.nan), r"block 1 has scale nan"),
        "int8: +inf scale": Case(scale(np.inf), r"block 1 has scale inf"),
        "int8: negative scale": Case(scale(-1.0), r"block 1 has scale -1\.0"),
        "int8: scale past the float32 range once applied": Case(scale(1e38), r"block 1 has scale 9\.99\d*e\+37; "
                                                                r"scales must be finite, >= 0 and <= 2\.679e\+36"),
        "int8: payload_bytes one byte long": Case(lambda t: parts(t, "int8", int8(t), payload_bytes=len(int8(t)) + 1),
                                                  r"int8 payload for 9610 values must be \d+ bytes, header says \d+"),
        "int8: stream ends early": Case(lambda t: parts(t, "int8", int8(t)[:-3], payload_bytes=len(int8(t))),
                                        r"ended after \d+ of \d+ bytes"),
        "int8: block size out of range": Case(lambda t: parts(t, "int8", int8(t), codec="int8:7"),
                                              r"block size must be an integer in \[16, 65536\]"),
        "int8: payload of another block size": Case(lambda t: parts(t, "int8", int8(t), codec="int8:64"),
                                                    r"int8:64 payload for 9610 values must be \d+ bytes, header says"),
        # ---- topk ----
        "topk: index out of range": Case(lambda t: parts(t, TOPK, topk([*HONEST_INDICES[:-1], P_MLP])),
                                         rf"has index {P_MLP}, out of range for a vector of {P_MLP} values"),
        "topk: indices decreasing": Case(lambda t: parts(t, TOPK, topk([*HONEST_INDICES[:-2], 5000, 4000])),
                                         r"index 4000 after 5000; indices must be strictly increasing"),
        "topk: duplicate index": Case(lambda t: parts(t, TOPK, topk([*HONEST_INDICES[:-2], 5000, 5000])),
                                      r"index 5000 after 5000; indices must be strictly increasing"),
        "topk: one pair too many": Case(lambda t: parts(t, TOPK, topk(np.arange(K + 1))),
                                        rf"topk:0\.01 payload for {P_MLP} values must be {8 * K} bytes, header says "
                                        rf"{8 * (K + 1)}"),
        "topk: half a pair": Case(lambda t: parts(t, TOPK, topk()[:-4], payload_bytes=8 * K),
                                  rf"ended after {8 * K - 4} of {8 * K} bytes"),
        "topk: NaN value": Case(lambda t: parts(t, TOPK, topk(values=np.where(np.arange(K) == 3, np.nan, 0.5))),
                                r"topk:0\.01 payload contains a non-finite value \(nan\) at position 3"),
        "topk: no fraction": Case(lambda t: parts(t, TOPK, topk(), codec="topk"), r"topk needs a fraction"),
        "topk: fraction 0": Case(lambda t: parts(t, TOPK, topk(), codec="topk:0"), r"fraction must be in \(0, 1\]"),
        "topk: fraction 1.5": Case(lambda t: parts(t, TOPK, topk(), codec="topk:1.5"),
                                   r"fraction must be in \(0, 1\]"),
        # ---- zstd ----
        "zstd+raw: not a zstd frame": Case(lambda t: parts(t, "zstd+raw", b"definitely not zstd at all"),
                                           r"does not start with a zstd frame header"),
        "zstd+int8: stream ends inside the frame": Case(lambda t: parts(t, "zstd+int8", zint8(t)[:-5],
                                                                        payload_bytes=len(zint8(t))),
                                                        r"zstd\+int8 update of alice ended after \d+ of \d+ bytes"),
        "zstd+int8: frame cut short": Case(lambda t: parts(t, "zstd+int8", zint8(t)[:-5]),
                                           r"truncated or corrupt zstd frame"),
        "zstd+int8: corrupt frame": Case(lambda t: parts(t, "zstd+int8", corrupted(zint8(t))), r"corrupt zstd frame"),
        "zstd+int8: bytes after the frame": Case(lambda t: parts(t, "zstd+int8", zint8(t) + b"extra"),
                                                 r"5 bytes after the end of its zstd frame"),
        "zstd+int8: frame declares no size": Case(lambda t: parts(t, "zstd+int8", unsized_zstd(int8(t))),
                                                  r"it declares no size"),
        "zstd+int8: frame declares another size": Case(lambda t: parts(t, "zstd+int8", zstd(int8(t)[:-260])),
                                                       r"must declare \d+ bytes of content for 9610 values, it declares"),
        "zstd+raw: decompression bomb": Case(lambda t: parts(t, "zstd+raw", rle_bomb(RAW_BYTES, blocks=4096)),
                                             rf"decompresses to more than the {RAW_BYTES} bytes it declares"),
        "zstd+raw: window over 8 MiB": Case(lambda t: parts(t, "zstd+raw", rle_bomb(RAW_BYTES, 4, window_log=24)),
                                            r"zstd frame asks for a 16777216-byte window, at most 8388608 is "
                                            r"accepted"),
        "zstd+raw: no payload_bytes": Case(lambda t: parts(t, "zstd+raw", zstd(raw(t)), payload_bytes=0),
                                           r"zstd\+raw payloads vary in size: the header must give payload_bytes"),
        "zstd+raw: payload_bytes past the bound": Case(lambda t: parts(t, "zstd+raw", zstd(raw(t)),
                                                                       payload_bytes=2 * RAW_BYTES),
                                                       rf"zstd\+raw payload for {P_MLP} values must be 1\.\.\d+ bytes"),
        "zstd+int8: NaN scale inside": Case(lambda t: parts(t, "zstd+int8", zstd(patched(
            int8(t), 260, np.float32(np.nan).tobytes()))), r"block 1 has scale nan"),
        "zstd+topk: index out of range inside": Case(lambda t: parts(t, "zstd+topk:0.01", zstd(
            topk([*HONEST_INDICES[:-1], P_MLP]))), rf"out of range for a vector of {P_MLP} values"),
        # ---- codec names ----
        "codec: unknown name": Case(lambda t: parts(t, "fp16", fp16(t), codec="lz4"),
                                    r"update codec must be one of \[.*\], got 'lz4'"),
        "codec: raw with a parameter": Case(lambda t: parts(t, "raw", raw(t), codec="raw:3"), r"raw takes no parameter"),
        "codec: the download delta as an update": Case(lambda t: parts(t, "fp16", fp16(t), codec="xor+zstd"),
                                                       r"got 'xor\+zstd'"),
        "codec: a 10 KB name": Case(lambda t: parts(t, "fp16", fp16(t), codec="z" * 10_000),
                                   r"got 'z+…\(\+\d+ chars\)$"),
    }


CASES = _cases()


async def refused(t: Target, case: Case) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await t.upload(case.stream(t))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.value.code(), e.value.details())
    assert re.search(case.says, e.value.details()), e.value.details()
    return e.value.details()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def target(tmp_path_factory, mlp_artifacts):  # noqa: F811
    async with serving(tmp_path_factory.mktemp("codecs") / "state", mlp_artifacts, ANNOUNCED, **CONFIG) as t:
        yield t


@pytest.mark.parametrize("name", list(CASES))
async def test_a_malformed_payload_is_invalid_argument_and_changes_nothing(target, name):
    from chaos_support import state_snapshot

    before = state_snapshot(target.coord)
    await refused(target, CASES[name])
    assert state_snapshot(target.coord) == before


async def test_after_every_malformed_payload_honest_updates_commit_their_exact_fedavg(tmp_path, mlp_artifacts):  # noqa: F811
    async with serving(tmp_path / "state", mlp_artifacts, ANNOUNCED, **CONFIG) as t:
        for case in CASES.values():
            await refused(t, case)
        honest = {"alice": ("int8", encode(t, "int8", 1), 30), "bob": ("raw", encode(t, "raw", 2), 70)}
        bob = pb.Task.FromString(await t.unary("PollTask", pb.PollRequest(
            client_id="bob", model_id=t.model, wait_ms=10_000).SerializeToString(), "bob"))
        assert bob.kind == pb.Task.FIT and bob.vector_sha256 == t.trained_from
        for cid, (spec, payload, n) in honest.items():
            stream = parts(t, spec, payload)
            stream[0] = pb.UpdatePart(header=header(t, client_id=cid, num_examples=n, codec=spec,
                                                    payload_bytes=len(payload), sha256=hashlib.sha256(payload).digest(),
                                                    base_sha256=b"" if whole(spec) else t.trained_from)
                                      ).SerializeToString()
            reply = pb.SubmitReply.FromString(await t.upload(stream, cid))
            assert reply.accepted and not reply.duplicate
        outcome = await asyncio.wait_for(t.coord.wait_done(), 60)
        assert outcome.state.name == "DONE" and outcome.rounds_completed == 1
        committed = await t.download("alice", 2)
    reference = FedAvg().new_round(t.vector)
    for cid, (spec, payload, n) in honest.items():
        reference.add(Update(cid, n, spec, tmp_path / "unused", payload=np.frombuffer(payload, np.uint8)))
    np.testing.assert_array_equal(committed, reference.result().vector)
