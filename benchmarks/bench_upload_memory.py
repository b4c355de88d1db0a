"""Peak coordinator RSS with N concurrent uploads of a P-value update against the same N one after another.

    python benchmarks/bench_upload_memory.py [--uploads 50] [--mb 20] [--max-concurrent 50]

A real `fedort coordinator serve` runs in a subprocess (the built-in MLP widened to ~mb MB of
float32 parameters); N + 1 clients join and are selected (the extra one never reports, so the
round stays open and aggregation/export stay out of the measurement). The benchmark process
uploads N raw updates over loopback gRPC in 1 MiB chunks — all at once, then (against a fresh
coordinator) one after another — and reads the coordinator's VmHWM (peak RSS) from /proc.
Issue 13's target: concurrent ≤ 2× sequential.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from fedort.ort.artifacts import build_artifacts, load_manifest
from fedort.ort.models import mlp
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.vector_stream import CHUNK_BYTES, describe
from fedort.protos.messages import UpdateHeader

WORK = Path(tempfile.gettempdir()) / "fedort-bench-upload-memory"


def rss_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


class Sampler(threading.Thread):
    """Peak anonymous and file-backed RSS of `pid`, sampled every 50 ms (VmHWM does not split them)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_anon, self.peak_file = pid, 0.0, 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                now = rss_mb(self.pid)
            except OSError:
                return
            self.peak_anon = max(self.peak_anon, now["RssAnon"])
            self.peak_file = max(self.peak_file, now["RssFile"])


def start_coordinator(artifacts: Path, root: Path, clients: int, max_concurrent: int) -> tuple[subprocess.Popen, int]:
    root.mkdir(parents=True)
    toml = root / "serve.toml"
    toml.write_text(f"[coordinator]\nmin_available_clients = {clients}\nmax_concurrent_uploads = {max_concurrent}\n"
                    f"upload_slot_wait_s = 600\nsubmissions_per_minute = 0\n")
    port_file = root / "port"
    proc = subprocess.Popen([sys.executable, "-m", "fedort", "coordinator", "serve", "--config", str(toml),
                             "--artifacts", str(artifacts), "--state-dir", str(root / "state"), "--address",
                             "127.0.0.1:0", "--port-file", str(port_file), "--rounds", "1", "--min-clients",
                             str(clients), "--round-timeout-s", "3600", "--insecure", "--auth", "open",
                             "--client-timeout-s", "0"],
                            stdout=subprocess.DEVNULL, stderr=open(root / "serve.log", "w"))
    deadline = time.monotonic() + 120
    while not (port_file.is_file() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"coordinator did not start: {(root / 'serve.log').read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, int(port_file.read_text())


async def run_case(artifacts: Path, root: Path, uploads: int, concurrent: bool, max_concurrent: int) -> dict:
    proc, port = start_coordinator(artifacts, root, uploads + 1, max_concurrent)
    try:
        options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            cids = [f"client-{i:03d}" for i in range(uploads + 1)]
            model = ""
            for cid in cids:
                model = (await stub.Join(pb.JoinRequest(client_id=cid), timeout=60)).model_id
            tasks = [await stub.PollTask(pb.PollRequest(client_id=c, model_id=model, wait_ms=20000), timeout=60)
                     for c in cids]
            assert all(t.kind == pb.Task.FIT for t in tasks), "every client must be selected"
            parts = [p async for p in stub.DownloadVector(pb.VectorRequest(client_id=cids[0], model_id=model,
                                                                          round=1), timeout=120)]
            g = np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")
            update = (g + np.float32(0.01)).astype(np.float32)
            meta = describe(update, model, 1)
            raw = update.tobytes()
            chunks = [raw[i:i + CHUNK_BYTES] for i in range(0, len(raw), CHUNK_BYTES)]
            idle = rss_mb(proc.pid)

            async def upload(cid: str) -> None:
                async def stream():
                    yield pb.UpdatePart(header=UpdateHeader(cid, meta, 10, {}, tasks[0].vector_sha256).to_pb())
                    for c in chunks:
                        yield pb.UpdatePart(chunk=c)
                reply = await stub.SubmitUpdate(stream(), timeout=1800)
                assert reply.accepted, reply

            sampler = Sampler(proc.pid)
            sampler.start()
            t0 = time.perf_counter()
            if concurrent:
                await asyncio.gather(*(upload(c) for c in cids[:uploads]))
            else:
                for c in cids[:uploads]:
                    await upload(c)
            seconds = time.perf_counter() - t0
            end = rss_mb(proc.pid)
            sampler.stop.set()
            sampler.join()
        return {"case": "concurrent" if concurrent else "sequential", "uploads": uploads,
                "update_mb": round(len(raw) / 1e6, 1), "idle_rss_mb": round(idle["VmRSS"], 1),
                "peak_rss_mb": round(end["VmHWM"], 1), "peak_anon_mb": round(sampler.peak_anon, 1),
                "peak_file_mb": round(sampler.peak_file, 1), "seconds": round(seconds, 1)}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uploads", type=int, default=50)
    ap.add_argument("--mb", type=float, default=20.0, help="update size in MB (float32 values)")
    ap.add_argument("--max-concurrent", type=int, default=50, help="the coordinator's max_concurrent_uploads")
    args = ap.parse_args(argv)
    hidden = max(1, round((args.mb * 1e6 / 4 - 10) / 75))
    artifacts = WORK / f"artifacts-h{hidden}"
    if not (artifacts / "manifest.json").exists():
        build_artifacts(mlp(hidden=hidden), artifacts)
    print(f"model: {load_manifest(artifacts).parameter_count:,} parameters", flush=True)
    runs = WORK / time.strftime("run-%Y%m%d-%H%M%S")
    results = []
    for concurrent in (True, False):
        res = asyncio.run(run_case(artifacts, runs / ("concurrent" if concurrent else "sequential"), args.uploads,
                                   concurrent, args.max_concurrent))
        print(json.dumps(res), flush=True)
        results.append(res)
    ratio = results[0]["peak_rss_mb"] / results[1]["peak_rss_mb"]
    print(f"peak RSS concurrent / sequential = {ratio:.2f} (target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
