"""Devices running the real edge-side secure-aggregation flow over real gRPC, without ONNX training.

Each device joins, polls for FIT, downloads the global vector g, and runs `SecAggFlow` with
trained = g + its delta (each device in its own thread, the edge transport as deployed). A
device can vanish at a chosen step ("share": after advertising keys, before sharing;
"upload": after sharing keys, before its masked upload; "unmask": after its upload, before
unmasking) — the transport is wrapped to raise `Vanished` at that point, as a device that loses
power would stop there.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fedort.edge_client.secagg.flow import SHARE, UNMASK_REQUEST, MaskInputs, SecAggFlow
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.protos.vector_stream import CHUNK_BYTES
from fedort.protos.messages import TaskKind
from fedort.common.secagg.scheme import CAPABILITY, SUPPORTED

CURRENT = {CAPABILITY: ",".join(SUPPORTED)}   # what a device of this build announces at Join
OLD = {}                                       # a device before protocol 1.3 announces no scheme

DROP_STEPS = {"share": SHARE, "unmask": UNMASK_REQUEST}


class Vanished(Exception):
    """The device stopped here (a test's dropout)."""


class VanishingTransport:
    """The real transport, until the device vanishes at `drop`."""

    def __init__(self, transport: Transport, drop: str | None) -> None:
        self.transport, self.drop = transport, drop

    def secagg_step(self, client_id, model_id, round, step, payload, wait_ms):
        if self.drop in DROP_STEPS and step == DROP_STEPS[self.drop]:
            raise Vanished(f"{client_id} vanished before step {step}")
        return self.transport.secagg_step(client_id, model_id, round, step, payload, wait_ms)

    def submit_update(self, header, vector):
        if self.drop == "upload":
            raise Vanished(f"{header.client_id} vanished before its masked upload")
        return self.transport.submit_update(header, vector)


def run_device(port: int, client_id: str, delta: np.ndarray, num_examples: int = 10, drop: str | None = None,
               timeout_s: float = 60.0, rounds: int = 1, wrap=None,
               capabilities: dict[str, str] | None = None,
               trained: threading.Event | None = None) -> list[tuple[str, str]]:
    """One device for `rounds` FIT tasks (or until DONE); its (outcome, message) per round, 'vanished' if it did.
    `wrap(transport)` may put a test's transport (same methods) in front of the real one; `capabilities`
    are announced at Join (default: this build's secagg schemes). With `trained`, the protocol starts before
    the update exists (`SecAggFlow.run_when`): the masking waits until the event is set."""
    real = Transport(ChannelConfig(f"127.0.0.1:{port}", insecure=True, rpc_timeout_s=timeout_s))
    transport = wrap(real) if wrap is not None else real
    out: list[tuple[str, str]] = []
    try:
        info = transport.join("secagg-test", client_id=client_id,
                              capabilities=CURRENT if capabilities is None else capabilities)
        while len(out) < rounds:
            task = transport.poll(client_id, info.model_id, 2000)
            if task.kind == TaskKind.DONE:
                break
            if task.kind != TaskKind.FIT:
                continue
            g = transport.download_vector(client_id, info.model_id, task.round)
            flow = SecAggFlow(VanishingTransport(transport, drop), client_id, info.model_id, task,
                              lambda what, fn: fn(), poll_wait_ms=2000)
            update = MaskInputs(g, g + delta.astype(np.float32), num_examples, {})
            try:
                if trained is None:
                    out.append(flow.run(*update, CHUNK_BYTES))
                else:
                    out.append(flow.run_when(lambda: trained.wait() and update, CHUNK_BYTES))  # noqa: B023
            except Vanished as e:
                out.append(("vanished", str(e)))
                break
    finally:
        real.close()
    return out


def run_devices(port: int, deltas: dict[str, np.ndarray], drops: dict[str, str] | None = None,
                examples: dict[str, int] | None = None, rounds: int = 1,
                wraps: dict | None = None, capabilities: dict | None = None,
                trained: threading.Event | None = None) -> dict[str, list[tuple[str, str]]]:
    """Every device in its own thread; their outcomes by client id (`wraps`, `capabilities`: per device, see
    run_device; `trained`: for all of them)."""
    drops, examples, wraps, capabilities = drops or {}, examples or {}, wraps or {}, capabilities or {}
    with ThreadPoolExecutor(max_workers=len(deltas)) as pool:
        futures = {c: pool.submit(run_device, port, c, d, examples.get(c, 10), drops.get(c), 60.0, rounds,
                                  wraps.get(c), capabilities.get(c), trained)
                   for c, d in deltas.items()}
        return {c: f.result(timeout=180) for c, f in futures.items()}


def deltas_for(ids, length: int, seed: int = 0, scale: float = 0.01) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c: (rng.standard_normal(length) * scale).astype(np.float32) for c in ids}


__all__ = ["CURRENT", "OLD", "Vanished", "deltas_for", "run_device", "run_devices", "threading"]
