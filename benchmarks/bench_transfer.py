"""Vector transfer over loopback gRPC against the real coordinator: download and upload MB/s, client memory.

Starts `fedort coordinator serve` as a subprocess (its own process and GIL, as deployed) on
artifacts of a built-in MLP sized so the trainable vector is about `--mb` MB, joins one client and
runs `--reps` rounds. Each round the client downloads the global vector (DownloadVector: header +
chunks into one preallocated array, its digest checked as it goes; from fedort with the device's own code,
`edge_client.Transport.download_global`, which checks the length and the digest the FIT task announced, BLAKE3
since protocol 1.6; `--download-client plain` uses the floor's client for both, as sessions <= 6 did) and
uploads an update
(SubmitUpdate: header + chunks); the upload is acknowledged only once the coordinator has
checked it, written it to its spool with fsync and committed a SQLite row, so that cost is in
the figure. MB/s = vector bytes / wall time of the RPC (10^6 bytes per MB). The coordinator runs
with `export_every = 0`: it exports its background inference model after the last round only, so
that no 100 MB model export competes with the next round's download.

Side by side, interleaved per round, the same client talks to a raw gRPC floor: a server with the
same service and message sizes that drains uploads and replays one buffer, with no checks,
hashing or disk; the ratio fedort/raw is the figure that survives a noisy machine. The floor's download
client is a plain one (generated stub, protobuf chunks, a fresh array, the header's digest: sha256 unless
`--raw-digest blake3`).

Client memory: peak tracemalloc bytes during the RPC beyond what existed before (numpy reports
its buffers to tracemalloc) and the growth of VmHWM (peak RSS, reset through /proc/self/clear_refs).
The target is the vector plus a few chunks.

    python benchmarks/bench_transfer.py              # 100 MB, 3 rounds per upload chunk size (256, 1024 KiB)
    python benchmarks/bench_transfer.py --quick      # 10 MB, 2 rounds
    python benchmarks/bench_transfer.py --upload-chunk-kib 64 256 1024 3968   # compare upload chunk sizes
    python benchmarks/bench_transfer.py --server-log # print the coordinator's DEBUG timings per update
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import grpc
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from fedort.ort.artifacts import build_artifacts, load_manifest  # noqa: E402
from fedort.ort.models import mlp  # noqa: E402
from fedort.protos.stubs import fedort_v1_pb2 as pb# noqa: E402
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc# noqa: E402
from fedort.common import digests# noqa: E402
from fedort.protos.vector_stream import VectorAssembler, describe, iter_chunks  # noqa: E402
from fedort.protos.messages import Task, meta_from_pb, meta_to_pb  # noqa: E402
from fedort.edge_client.transport.channel import ChannelConfig  # noqa: E402
from fedort.edge_client.transport.grpc_transport import Transport  # noqa: E402

CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


def artifacts_for(mb: float) -> Path:
    """Artifacts of mlp(hidden) with 75*hidden + 10 ≈ mb*1e6/4 parameters (cached under .work/)."""
    hidden = max(1, round(mb * 1e6 / 4 / 75))
    folder = HERE / ".work" / f"transfer-mlp-{hidden}"
    if not (folder / "manifest.json").is_file():
        build_artifacts(mlp(hidden=hidden), folder)
    return folder


def vm_hwm() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_hwm() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def cpu_seconds(pid: int) -> float:
    """CPU time all threads of process `pid` have run so far (/proc/PID/task/*/schedstat; 0 if unreadable)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        return 0.0
    return total / 1e9


class Measure:
    """Wall time, tracemalloc peak beyond the start, and peak-RSS growth of one block; with `server` (a pid),
    also the CPU time that server process spent meanwhile (all its threads: gRPC's, the loop, helpers)."""

    def __init__(self, server: int | None = None) -> None:
        self.server = server

    def __enter__(self):
        reset_hwm()
        self.rss0 = vm_hwm()
        tracemalloc.reset_peak()
        self.base = tracemalloc.get_traced_memory()[0]
        self.cpu0 = cpu_seconds(self.server) if self.server else 0.0
        self.client0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.client_cpu = time.process_time() - self.client0
        self.server_cpu = cpu_seconds(self.server) - self.cpu0 if self.server else 0.0
        self.peak = tracemalloc.get_traced_memory()[1] - self.base
        self.rss = vm_hwm() - self.rss0


def download(stub, cid: str, model: str, round: int) -> np.ndarray:
    asm = None
    for part in stub.DownloadVector(pb.VectorRequest(client_id=cid, model_id=model, round=round), timeout=120):
        if asm is None:
            asm = VectorAssembler(meta_from_pb(part.header))
        else:
            asm.add(part.chunk)
    return asm.finish()


def drain(stub, cid: str, model: str, round: int) -> None:
    """Transport alone: the floor's messages received (generated stub) and dropped, no copy, no digest."""
    for _ in stub.DownloadVector(pb.VectorRequest(client_id=cid, model_id=model, round=round), timeout=120):
        pass


def device_download(transport, cid: str, model: str, round: int, task) -> np.ndarray:
    """What a device does (`fedort edge run`: edge_client.Transport.download_global): the length and the
    digest the FIT task announced are checked, BLAKE3 when the task carries one (protocol 1.6)."""
    vector, _ = transport.download_global(cid, model, round, expected_length=task.vector_length or None,
                                          expected_sha256=task.vector_sha256 or None,
                                          expected_blake3=task.vector_blake3 or None)
    return vector


def upload(stub, cid: str, model: str, round: int, vector: np.ndarray, sha: bytes, chunk: int,
           trained_from: bytes, digest: str = "") -> pb.SubmitReply:
    meta = describe(vector, model, round, chunk_size=chunk, sha256=sha, digest=digest)
    header = pb.UpdateHeader(client_id=cid, vector=meta_to_pb(meta), num_examples=1, trained_from_sha256=trained_from)

    def parts():
        yield pb.UpdatePart(header=header)
        for c in iter_chunks(vector, chunk):
            yield pb.UpdatePart(chunk=c)
    return stub.SubmitUpdate(parts(), timeout=120)


class RawServicer(pb_grpc.CoordinatorServicer):
    """The transport floor: the same RPCs with no checks, no hashing, no disk (drain / replay one buffer)."""

    def __init__(self, length: int, chunk: int, digest: str = "") -> None:
        self.chunk = chunk
        self.vector = np.ones(length, np.float32)
        self.meta = describe(self.vector, "raw", 1, digest=digest)

    async def Join(self, request, context):
        return pb.JoinReply(client_id="bench", model_id="raw")

    async def PollTask(self, request, context):
        return pb.Task(kind=pb.Task.FIT, round=1)

    async def DownloadVector(self, request, context):
        meta = describe(self.vector, "raw", request.round, sha256=self.meta.sha256, digest=self.meta.digest)
        yield pb.VectorPart(header=meta_to_pb(meta))
        for chunk in iter_chunks(self.vector, self.chunk):
            yield pb.VectorPart(chunk=chunk)

    async def SubmitUpdate(self, request_iterator, context):
        while await context.read() is not grpc.aio.EOF:
            pass
        return pb.SubmitReply(accepted=True)


def raw_server(length: int, chunk: int, port_file: Path, digest: str = "") -> None:
    import asyncio

    from fedort.coordinator.server import server_options
    from fedort.coordinator.config import CoordinatorConfig

    async def serve():
        options = server_options(CoordinatorConfig(artifacts=Path("."), state_dir=Path(".")))
        server = grpc.aio.server(options=options)
        pb_grpc.add_CoordinatorServicer_to_server(RawServicer(length, chunk, digest), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_file.write_text(str(port))
        await server.wait_for_termination()
    asyncio.run(serve())


def start(cmd: list[str], port_file: Path, log_path: Path) -> tuple[subprocess.Popen, int]:
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {log_path.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, int(port_file.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="vector size in MB (default 100)")
    ap.add_argument("--reps", type=int, default=3, help="rounds per upload chunk size (default 3)")
    ap.add_argument("--upload-chunk-kib", type=int, nargs="+", default=[256, 1024], help="client upload chunk sizes to compare")
    ap.add_argument("--download-chunk-kib", type=int, default=1024, help="the coordinator's download chunk size")
    ap.add_argument("--server-log", action="store_true", help="print the coordinator's DEBUG log afterwards")
    ap.add_argument("--quick", action="store_true", help="10 MB, 2 rounds")
    ap.add_argument("--digest", choices=["auto", "sha256"], default="auto",
                    help="update digest: auto = what the coordinator announces (BLAKE3 since protocol 1.3, as a "
                         "device picks it), sha256 = as before")
    ap.add_argument("--download-client", choices=["device", "plain"], default="device",
                    help="fedort's download: device = the device's own path (edge_client.Transport.download_global, "
                         "digest as the FIT task announces: BLAKE3 since protocol 1.6), plain = the floor's client "
                         "(generated stub + VectorAssembler, sha256): the server-only comparison of sessions <= 6")
    ap.add_argument("--raw-digest", choices=["sha256", "blake3"], default="sha256",
                    help="the digest the floor's download header names (its client checks with it; default sha256)")
    ap.add_argument("--drain", action="store_true",
                    help="also time a client that receives the floor's download and drops it (transport alone, "
                         "less than any correct download does): printed as a second ratio")
    ap.add_argument("--raw-server", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.reps = 10.0, 2
    arts = artifacts_for(args.mb)
    if args.raw_server:
        raw_server(load_manifest(arts).parameter_count, args.download_chunk_kib * 1024, args.raw_server,
                   "" if args.raw_digest == "sha256" else args.raw_digest)
        return 0
    manifest = load_manifest(arts)
    nbytes = manifest.parameter_count * 4
    rounds = args.reps * len(args.upload_chunk_kib)
    print(f"vector: {manifest.parameter_count:,} float32 = {nbytes / 1e6:.1f} MB; {rounds} rounds; "
          f"python {platform.python_version()}, grpcio {grpc.__version__}, {os.cpu_count()} cpus")

    with tempfile.TemporaryDirectory(prefix="fedort-bench-") as tmp:
        tmp = Path(tmp)
        fedort = Path(sys.executable).with_name("fedort")
        level = ["--log-level", "DEBUG"] if args.server_log else []
        cmd = ([str(fedort), *level, "coordinator"] if fedort.exists() else [sys.executable, "-m", "coordinator"]) + [
            "serve", "--artifacts", str(arts), "--state-dir", str(tmp / "state"), "--address", "127.0.0.1:0",
            "--port-file", str(tmp / "port"), "--rounds", str(rounds), "--min-clients", "1", "--round-timeout-s", "600",
            "--client-timeout-s", "0", "--config", str(tmp / "bench.toml"), "--insecure", "--auth", "open"]
        # export_every = 0: the inference model of a 100 MB vector is written once, after the last round,
        # instead of in the background during the next round's download (export is not transfer)
        (tmp / "bench.toml").write_text(f"download_chunk_bytes = {args.download_chunk_kib * 1024}\nexport_every = 0\n")
        raw_cmd = [sys.executable, __file__, "--raw-server", str(tmp / "raw-port"), "--mb", str(args.mb),
                   "--download-chunk-kib", str(args.download_chunk_kib), "--raw-digest", args.raw_digest]
        server, port = start(cmd, tmp / "port", tmp / "coordinator.log")
        raw, raw_port = start(raw_cmd, tmp / "raw-port", tmp / "raw.log")
        try:
            rows = run_rounds(port, raw_port, args, nbytes, {"fedort": server.pid, "raw": raw.pid})
        finally:
            for proc in (server, raw):
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
            if args.server_log:
                print((tmp / "coordinator.log").read_text())

    print(f"\n{'direction':<9} {'chunk KiB':>9} {'fedort MB/s':>11} {'raw gRPC MB/s':>13} {'fedort/raw':>10} "
          f"{'best fedort':>11} {'client peak MB':>14} {'RSS growth MB':>13} {'server CPU ms fedort/raw':>24}"
          f" {'client CPU ms fedort/raw':>24}")
    for (name, direction, chunk), ms in rows.items():
        if name != "fedort":
            continue
        raw = rows[("raw", direction, chunk)]
        rates = [nbytes / 1e6 / m.seconds for m in ms]
        raw_rates = [nbytes / 1e6 / m.seconds for m in raw]
        ratio = statistics.median(f / r for f, r in zip(rates, raw_rates))
        print(f"{direction:<9} {chunk // 1024:>9} {statistics.median(rates):>11.0f} {statistics.median(raw_rates):>13.0f} "
              f"{ratio:>10.2f} {max(rates):>11.0f} {max(m.peak for m in ms) / 1e6:>14.1f} "
              f"{max(m.rss for m in ms) / 1e6:>13.1f} "
              f"{1e3 * statistics.median(m.server_cpu for m in ms):>15.0f} / {1e3 * statistics.median(m.server_cpu for m in raw):<6.0f}"
              f"{1e3 * statistics.median(m.client_cpu for m in ms):>15.0f} / {1e3 * statistics.median(m.client_cpu for m in raw):<6.0f}")
    if ("drain", "download", args.download_chunk_kib * 1024) in rows:
        key = ("download", args.download_chunk_kib * 1024)
        fed, dr = rows[("fedort", *key)], rows[("drain", *key)]
        rate = lambda ms: statistics.median(nbytes / 1e6 / m.seconds for m in ms)   # noqa: E731
        print(f"download vs transport alone (drain): fedort {rate(fed):.0f} MB/s, drain {rate(dr):.0f} MB/s, "
              f"fedort/drain {statistics.median(d.seconds / f.seconds for f, d in zip(fed, dr)):.2f}")
    print(f"(vector {nbytes / 1e6:.0f} MB; medians over {args.reps} rounds; client peak = tracemalloc peak beyond the "
          "start of the call (numpy arrays; not a BufferPool's mmap), RSS growth = VmHWM growth; server / client CPU = CPU "
          "time of the server process / of this process (all threads) during the call)")
    return 0


def run_rounds(port: int, raw_port: int, args, nbytes: int, pids: dict[str, int] | None = None) -> dict:
    """Per round: download from both servers, then upload to both (interleaved, so load drifts hit both)."""
    rows: dict[tuple[str, str, int], list[Measure]] = {}
    tracemalloc.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as channel, \
            grpc.insecure_channel(f"127.0.0.1:{raw_port}", options=CHANNEL_OPTIONS) as raw_channel:
        stubs = {"fedort": pb_grpc.CoordinatorStub(channel), "raw": pb_grpc.CoordinatorStub(raw_channel)}
        join = stubs["fedort"].Join(pb.JoinRequest(client_id="bench"), timeout=30)
        model, cid = join.model_id, join.client_id
        algorithm = digests.choose(join.update_digests) if args.digest == "auto" else digests.SHA256
        print(f"update digest: {algorithm} (the coordinator announces {list(join.update_digests) or 'sha256 only'}); "
              f"fedort download: {args.download_client} client; floor download digest: {args.raw_digest}")
        device = Transport(ChannelConfig(f"127.0.0.1:{port}", insecure=True), channel)   # shares the channel
        chunk_kib = [k for k in args.upload_chunk_kib for _ in range(args.reps)]
        for r, kib in enumerate(chunk_kib, start=1):
            task = stubs["fedort"].PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=30_000), timeout=120)
            assert task.kind == pb.Task.FIT and task.round == r, task
            line = [f"round {r}:"]
            order = ("fedort", "raw") if r % 2 else ("raw", "fedort")   # alternate, so order effects cancel
            downloads = order if not args.drain else order + ("drain",) if r % 2 else ("drain",) + order
            for name in downloads:
                with Measure((pids or {}).get("raw" if name == "drain" else name)) as m:
                    if name == "drain":
                        drain(stubs["raw"], cid, model, r)
                    elif name == "fedort" and args.download_client == "device":
                        vector = device_download(device, cid, model, r, Task.from_pb(task))
                    else:
                        vector = download(stubs[name], cid, model, r)
                rows.setdefault((name, "download", args.download_chunk_kib * 1024), []).append(m)
                line.append(f"{name} down {nbytes / 1e6 / m.seconds:5.0f} MB/s")
            # the client hashes its update before sending (the header carries the digest); not in the timing
            sha = digests.digest(algorithm, memoryview(vector).cast("B"))
            for name in order:
                with Measure((pids or {}).get(name)) as m:
                    reply = upload(stubs[name], cid, model, r, vector, sha, kib * 1024, task.vector_sha256,
                                   "" if algorithm == digests.SHA256 else algorithm)
                assert reply.accepted, reply
                rows.setdefault((name, "upload", kib * 1024), []).append(m)
                line.append(f"{name} up {nbytes / 1e6 / m.seconds:5.0f} MB/s")
            print(line[0] + " " + ", ".join(line[1:]), flush=True)
            del vector
    tracemalloc.stop()
    return rows


if __name__ == "__main__":
    sys.exit(main())
