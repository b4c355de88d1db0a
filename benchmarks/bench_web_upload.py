"""A browser device's upload path against a Python device's: a resumable upload over HTTP (Connect, the web
port) vs SubmitUpdate over gRPC, the same vector to the same coordinator, interleaved round by round.

Starts `fedort coordinator serve --web-address` as a subprocess on artifacts of a built-in MLP whose
vector is about `--mb` MB (20 by default), one client, one update per round. Odd rounds upload with
SubmitUpdate (gRPC, 1 MiB chunks, as `fedort edge run` does), even rounds with BeginUpload /
PutUploadPart (parts of the announced max_part_bytes) / CommitUpload through connect-python's own
client (binary protobuf, HTTP/1.1, as a browser's fetch). Both are timed from the first byte to the
acknowledgement, which both give only once the update is checked, spooled with fsync and its row
committed. MB/s = vector bytes / wall time (10^6 bytes per MB); the ratio web/gRPC is the figure to
quote (the aim is >= 0.5).

    python benchmarks/bench_web_upload.py            # 20 MB, 3 uploads per path
    python benchmarks/bench_web_upload.py --quick    # 5 MB, 2 uploads per path
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_transfer import CHANNEL_OPTIONS, artifacts_for, download, start, upload  # noqa: E402
from fedort.ort.artifacts import load_manifest# noqa: E402
from fedort.protos.stubs import fedort_v1_pb2 as pb# noqa: E402
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc# noqa: E402
from fedort.protos.vector_stream import describe# noqa: E402
from fedort.protos.messages import meta_to_pb  # noqa: E402

try:
    from fedort.protos.stubs.fedort_v1_connect import CoordinatorClient
except ImportError:
    raise SystemExit("bench_web_upload needs the web extra: pip install 'fedort[web]'") from None

CID = "bench"


async def web_upload(client, header: pb.UpdateHeader, payload: bytes) -> pb.SubmitReply:
    state = await client.begin_upload(pb.BeginUploadRequest(header=header))
    while state.offset < len(payload):
        data = payload[state.offset:state.offset + state.max_part_bytes]
        state = await client.put_upload_part(pb.UploadPartRequest(
            client_id=CID, upload_id=state.upload_id, offset=state.offset, data=data,
            sha256=hashlib.sha256(data).digest()))
    return await client.commit_upload(pb.UploadRef(client_id=CID, upload_id=state.upload_id))


def run(port: int, web_port: int, rounds: int) -> dict[str, list[float]]:
    seconds: dict[str, list[float]] = {"grpc": [], "web": []}
    loop = asyncio.new_event_loop()
    web = CoordinatorClient(f"http://127.0.0.1:{web_port}", timeout_ms=120_000, send_compression=None)  # a browser sends plain bytes
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        model = stub.Join(pb.JoinRequest(client_id=CID, device_name=CID), timeout=30).model_id
        for r in range(1, rounds + 1):
            task = stub.PollTask(pb.PollRequest(client_id=CID, model_id=model, wait_ms=30_000), timeout=60)
            assert task.kind == pb.Task.FIT and task.round == r, task
            update = download(stub, CID, model, r) + np.float32(0.001)
            sha = hashlib.sha256(update.tobytes()).digest()
            path = "grpc" if r % 2 else "web"
            t0 = time.perf_counter()
            if path == "grpc":
                reply = upload(stub, CID, model, r, update, sha, 1 << 20, task.vector_sha256)
            else:
                meta = describe(update, model, r, sha256=sha)
                header = pb.UpdateHeader(client_id=CID, vector=meta_to_pb(meta), num_examples=1,
                                         trained_from_sha256=task.vector_sha256)
                reply = loop.run_until_complete(web_upload(web, header, update.tobytes()))
            seconds[path].append(time.perf_counter() - t0)
            assert reply.accepted and not reply.duplicate, reply
    loop.close()
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20.0, help="vector size in MB (default 20)")
    ap.add_argument("--reps", type=int, default=3, help="uploads per path (default 3)")
    ap.add_argument("--quick", action="store_true", help="5 MB, 2 uploads per path")
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.reps = 5.0, 2
    arts = artifacts_for(args.mb)
    nbytes = load_manifest(arts).parameter_count * 4
    rounds = 2 * args.reps
    with tempfile.TemporaryDirectory(prefix="fedort-bench-") as tmp:
        tmp = Path(tmp)
        fedort = Path(sys.executable).with_name("fedort")
        (tmp / "bench.toml").write_text("export_every = 0\nweb_address = \"127.0.0.1:0\"\n")
        cmd = [str(fedort), "--log-level", "INFO", "coordinator", "serve", "--artifacts", str(arts), "--state-dir", str(tmp / "state"),
               "--address", "127.0.0.1:0", "--port-file", str(tmp / "port"), "--rounds", str(rounds),
               "--min-clients", "1", "--round-timeout-s", "600", "--client-timeout-s", "0", "--config",
               str(tmp / "bench.toml"), "--insecure", "--auth", "open"]
        server, port = start(cmd, tmp / "port", tmp / "coordinator.log")
        try:
            web_port = web_port_of(tmp / "coordinator.log")
            seconds = run(port, web_port, rounds)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
    rate = {k: [nbytes / 1e6 / s for s in v] for k, v in seconds.items()}
    print(f"vector {nbytes / 1e6:.1f} MB, {args.reps} uploads per path, interleaved")
    print(f"{'path':<28} {'median MB/s':>11} {'best MB/s':>10}")
    for name, label in (("grpc", "gRPC SubmitUpdate (stream)"), ("web", "HTTP Connect resumable")):
        print(f"{label:<28} {statistics.median(rate[name]):>11.0f} {max(rate[name]):>10.0f}")
    ratio = statistics.median(w / g for w, g in zip(rate["web"], rate["grpc"]))
    print(f"web / gRPC (median of the per-pair ratios): {ratio:.2f}x")
    return 0


def web_port_of(log: Path, timeout: float = 30.0) -> int:
    """The web port the coordinator logged ("web port serving ... on HOST:PORT")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if "web port serving" in line:
                return int(line.rsplit(":", 1)[1].split()[0])
        time.sleep(0.05)
    raise SystemExit(f"the coordinator did not log its web port: {log.read_text()[-2000:]}")


if __name__ == "__main__":
    sys.exit(main())
