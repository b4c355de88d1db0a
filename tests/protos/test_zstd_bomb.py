"""A zstd frame that declares the right size but expands far past it (a decompression bomb of RLE
blocks) is refused INVALID_ARGUMENT after at most the declared size was decompressed: the
coordinator's resident memory barely moves."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from chaos_support import CoordinatorProcess
from zstd_frames import rle_bomb
from fedort.ort.artifacts import build_artifacts
from fedort.ort.models import mlp
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_codecs import get_codec
from fedort.protos.update_codecs.zstd import max_compressed_size
from fedort.common.errors import VectorError

LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")
HIDDEN = 3200
P_WIDE = 75 * HIDDEN + 10      # 64 -> HIDDEN -> 10: large enough that zstd decodes its frames through a ring buffer


@pytest.fixture(scope="module")
def wide_artifacts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wide-mlp")
    build_artifacts(mlp(hidden=HIDDEN), out)
    return out


def test_an_rle_bomb_is_refused_once_its_output_passes_the_declared_size():
    length = P_WIDE
    bomb = rle_bomb(4 * length, blocks=8192, window_log=17)   # 1 GiB if decoded to its end
    dec = get_codec("zstd+raw").decoder(length, len(bomb))
    with pytest.raises(VectorError, match=f"decompresses to more than the {4 * length} bytes it declares"):
        dec.feed(bomb)


def test_a_frame_that_asks_for_a_huge_window_is_refused():
    bomb = rle_bomb(400_000, blocks=4, window_log=30)
    with pytest.raises(VectorError, match="window"):
        get_codec("zstd+raw").decoder(100_000, len(bomb)).feed(bomb)


def test_an_honest_frame_still_decodes_across_chunks():
    vector = np.zeros(300_000, np.float32)
    vector[::1000] = 1.5                                     # very compressible: many blocks per chunk
    payload = get_codec("zstd+raw").encode(vector)
    dec = get_codec("zstd+raw").decoder(len(vector), len(payload))
    out = np.zeros_like(vector)
    for start in range(0, len(payload), 7):
        for piece in dec.feed(payload[start:start + 7]):
            piece.write_to(out)
    for piece in dec.finish():
        piece.write_to(out)
    np.testing.assert_array_equal(out, vector)


def _rss_peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


@LINUX_ONLY
def test_the_bomb_sent_to_a_coordinator_process_is_invalid_argument_and_costs_a_few_mib(tmp_path, wide_artifacts):
    proc = CoordinatorProcess(wide_artifacts, tmp_path / "state", tmp_path / "coordinator.log",
                              min_clients=1, rounds=1, round_timeout=60)
    try:
        stub = proc.stub
        join = stub.Join(pb.JoinRequest(client_id="bomber", device_name="bomber"), timeout=15)
        task = stub.PollTask(pb.PollRequest(client_id="bomber", model_id=join.model_id, wait_ms=5000), timeout=20)
        assert task.kind == pb.Task.FIT
        bomb = rle_bomb(4 * P_WIDE, blocks=8192, window_log=17)   # 1 GiB if decoded to its end
        assert len(bomb) <= max_compressed_size(4 * P_WIDE)
        header = pb.UpdateHeader(client_id="bomber", num_examples=10, trained_from_sha256=task.vector_sha256,
                                 vector=pb.VectorHeader(model_id=join.model_id, round=task.round, length=P_WIDE,
                                                        dtype="float32", codec="zstd+raw",
                                                        sha256=hashlib.sha256(bomb).digest(),
                                                        chunk_size=len(bomb), payload_bytes=len(bomb)))
        before = _rss_peak_kib(proc.proc.pid)
        with pytest.raises(grpc.RpcError) as info:
            stub.SubmitUpdate(iter([pb.UpdatePart(header=header), pb.UpdatePart(chunk=bomb)]), timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"decompresses to more than the {4 * P_WIDE} bytes it declares" in info.value.details()
        grown_mib = (_rss_peak_kib(proc.proc.pid) - before) / 1024
        assert grown_mib < 8, f"peak RSS grew {grown_mib:.1f} MiB for a {len(bomb)}-byte payload"
    finally:
        proc.kill()
