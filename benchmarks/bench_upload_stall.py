"""Why 1 MiB upload chunks lost more to the per-chunk work than 256 KiB ones: the stream window stalls the sender.

Three gRPC servers with the coordinator's own server options (`server_options`: a fixed 256 KiB
per-stream receive window) receive the same 100 MB upload, interleaved:

    floor       drains the stream (bench_transfer.py's raw floor)
    plain       after each message, pauses W µs per MiB before asking for the next one (as the
                coordinator did: hash, finite check, write, then read)
    read-ahead  asks for the next message first, then pauses (what CoordinatorServicer._chunks does
                for chunks larger than the window)

The pause is a blocking sleep on the event loop: it holds the loop like the real per-chunk work
but burns no CPU, so the figure isolates the transport's stall from CPU contention (it holds on
a loaded machine too). gRPC opens a stream's window for the whole message only while a read is
pending; a 256 KiB chunk fits the standing window, so the device sends it during the pause; of a
1 MiB chunk only a quarter fits and the device waits for the pause plus a round trip.

    python benchmarks/bench_upload_stall.py                       # 1 MiB chunks, 300 µs per MiB, 9 rounds
    python benchmarks/bench_upload_stall.py --chunk-kib 256       # the same pause per byte at 256 KiB chunks
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fedort.coordinator.config import CoordinatorConfig  # noqa: E402
from fedort.coordinator.server import server_options  # noqa: E402
from fedort.protos.stubs import fedort_v1_pb2 as pb# noqa: E402
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc# noqa: E402

VARIANTS = ("floor", "plain", "read-ahead")


async def serve(variant: str, port_file: Path, pause_s: float) -> None:
    server = grpc.aio.server(options=server_options(CoordinatorConfig(artifacts=Path("."), state_dir=Path("."))))

    async def submit(request_iterator, context):
        if variant == "read-ahead":
            ahead = asyncio.ensure_future(context.read())
            while await ahead is not grpc.aio.EOF:
                ahead = asyncio.ensure_future(context.read())
                await asyncio.sleep(0)           # let the read be posted
                time.sleep(pause_s)
        else:
            while await context.read() is not grpc.aio.EOF:
                if variant == "plain":
                    time.sleep(pause_s)
        return pb.SubmitReply(accepted=True)

    handler = grpc.stream_unary_rpc_method_handler(submit, request_deserializer=bytes,
                                                   response_serializer=pb.SubmitReply.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("fedort.v1.Coordinator",
                                                                          {"SubmitUpdate": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_file.write_text(str(port))
    await server.wait_for_termination()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--chunk-kib", type=int, default=1024)
    ap.add_argument("--pause-us-per-mib", type=float, default=300.0,
                    help="the per-chunk work, as a pause per MiB (300: BLAKE3 + finite check + page-cache write)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve[0], Path(args.serve[1]), float(args.serve[2])))
        return 0
    chunk = args.chunk_kib * 1024
    pause = args.pause_us_per_mib * 1e-6 * chunk / (1 << 20)
    view = memoryview(np.ones(int(args.mb * 1e6 / 4), np.float32)).cast("B")
    procs, stubs = [], {}
    with tempfile.TemporaryDirectory(prefix="fedort-stall-") as tmp:
        try:
            for v in VARIANTS:
                port_file = Path(tmp) / v
                procs.append(subprocess.Popen([sys.executable, __file__, "--serve", v, str(port_file), str(pause)]))
                while not port_file.exists() or not port_file.read_text():
                    if procs[-1].poll() is not None:
                        raise SystemExit(f"{v} server exited")
                    time.sleep(0.05)
                channel = grpc.insecure_channel(f"127.0.0.1:{port_file.read_text()}",
                                                options=[("grpc.max_send_message_length", 64 << 20)])
                stubs[v] = pb_grpc.CoordinatorStub(channel)

            def parts():
                yield pb.UpdatePart(header=pb.UpdateHeader(client_id="bench"))
                for start in range(0, len(view), chunk):
                    yield pb.UpdatePart(chunk=bytes(view[start:start + chunk]))

            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for r in range(args.rounds):
                for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
                    t0 = time.perf_counter()
                    stubs[v].SubmitUpdate(parts(), timeout=120)
                    times[v].append(1e3 * (time.perf_counter() - t0))
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
    n = -(-len(view) // chunk)
    print(f"{len(view) / 1e6:.0f} MB in {n} chunks of {args.chunk_kib} KiB; pause {1e6 * pause:.0f} µs per chunk = "
          f"{1e3 * pause * n:.0f} ms per upload; load {os.getloadavg()[0]:.1f}; medians over {args.rounds} rounds")
    floor = statistics.median(times["floor"])
    for v in VARIANTS:
        t = statistics.median(times[v])
        print(f"  {v:<10} {t:7.1f} ms  (+{t - floor:5.1f} ms over the floor)  best {min(times[v]):6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
