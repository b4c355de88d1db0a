"""A simulation worker: hosts many virtual clients in one process over one channel and one session.

Each virtual client is a real `EdgeClient` (same join / poll / download / train / upload code as
a device), sharing the worker's gRPC channel, artifact cache and ORT training session, so an
idle client costs only its id and data indices. The worker watches the coordinator's round
with a Heartbeat and polls each of its clients once per round (and again every `repoll_s`, to
catch a round the coordinator retried with a new selection) instead of holding one long-poll
per client.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from fedort.edge_client.cache import ArtifactCache
from fedort.edge_client.client import EdgeClient, EdgeConfig, RoundReport
from fedort.edge_client.retry import Backoff
from fedort.edge_client.transport import ChannelConfig, Transport
from fedort.protos.messages import Task, TaskKind
from fedort.simulations.attacks import parse_attack
from fedort.simulations.population import ClientArrays, DataSource, VirtualClient

log = logging.getLogger("fedort.sim.worker")


@dataclass(frozen=True)
class WorkerPlan:
    """Everything a worker needs (picklable: it crosses process and Ray boundaries)."""

    address: str
    cache_dir: Path
    source: DataSource
    clients: tuple[VirtualClient, ...]
    intra_op_threads: int = 1
    repoll_s: float = 2.0
    idle_s: float = 0.005
    timeout_s: float = 3600.0
    attack: str = ""                            # simulations.attacks spec played by the clients in `attackers`
    attackers: frozenset[str] = frozenset()
    module_factory: Callable | None = None      # EdgeConfig.module_factory of every client (a top-level function)
    stragglers: frozenset[str] = frozenset()    # clients that stop after `straggler_steps` optimizer steps
    straggler_steps: int = 1


@dataclass
class WorkerStats:
    """What one worker did, per round: fits, examples and bytes moved."""

    fits: int = 0
    evaluations: int = 0
    bytes_up: dict[int, int] = field(default_factory=dict)
    bytes_down: dict[int, int] = field(default_factory=dict)
    train_seconds: float = 0.0
    polls: int = 0


def run_worker(plan: WorkerPlan) -> WorkerStats:
    """Join every client of the plan, then serve their tasks until the coordinator is done."""
    stats = WorkerStats()
    transport = Transport(ChannelConfig(plan.address, insecure=True))
    cache = ArtifactCache(plan.cache_dir)
    arrays = ClientArrays(plan.source)
    try:
        clients = join_clients(plan, transport, cache, arrays, stats)
        serve_clients(plan, transport, clients, stats)
    finally:
        transport.close()
    return stats


class _Ledger:
    """Counts a worker's fits and bytes per round from its clients' reports."""

    def __init__(self, stats: WorkerStats) -> None:
        self.stats = stats
        self.vector_bytes = 0

    def __call__(self, report: RoundReport) -> None:
        s = self.stats
        if report.kind != "fit":
            s.evaluations += 1
            return
        s.fits += 1
        s.train_seconds += report.seconds
        s.bytes_up[report.round] = s.bytes_up.get(report.round, 0) + self.vector_bytes
        if not report.vector_cached:
            s.bytes_down[report.round] = s.bytes_down.get(report.round, 0) + self.vector_bytes


def join_clients(plan: WorkerPlan, transport: Transport, cache: ArtifactCache, arrays: ClientArrays,
              stats: WorkerStats) -> list[EdgeClient]:
    """Join every virtual client; the first one fetches the artifacts and opens the shared session."""
    ledger = _Ledger(stats)
    clients: list[EdgeClient] = []
    session = None
    for vc in plan.clients:
        config = EdgeConfig(
            coordinator=plan.address, name=vc.client_id, client_id=vc.client_id, cache_dir=plan.cache_dir, insecure=True,
            heartbeats=False, persist_identity=False, leave_on_stop=False, poll_wait_ms=0,
            intra_op_threads=plan.intra_op_threads, backoff=Backoff(give_up_after_s=plan.timeout_s),
            update_hook=parse_attack(plan.attack) if vc.client_id in plan.attackers else None,
            module_factory=plan.module_factory,
            max_local_steps=plan.straggler_steps if vc.client_id in plan.stragglers else None,
        )
        client = EdgeClient(config, transport=transport, session=session, data=arrays.for_client(vc),
                            cache=cache, on_report=ledger)
        client.join()
        session = client.session
        ledger.vector_bytes = client.manifest.parameter_count * 4
        clients.append(client)
    return clients


def serve_clients(plan: WorkerPlan, transport: Transport, clients: list[EdgeClient], stats: WorkerStats) -> None:
    """Serve the joined clients' tasks until the coordinator is DONE or FAILED (or `plan.timeout_s` passes)."""
    if not clients:
        return
    beacon = clients[0].client_id
    deadline = time.monotonic() + plan.timeout_s
    polled, polled_at = None, 0.0
    idle = plan.idle_s
    while time.monotonic() < deadline:
        round, state = transport.heartbeat(beacon)
        if state.final:
            return
        now = time.monotonic()
        # Selection happens when a round enters TRAINING (or the final EVALUATING phase): poll
        # every client once then, and again now and then in case a retried round re-selects.
        if state.hands_out_work and ((round, state) != polled or now - polled_at >= plan.repoll_s):
            polled, polled_at = (round, state), now
            if _poll_each(clients, stats) == "done":
                return
            idle = plan.idle_s
            continue
        time.sleep(idle)
        idle = min(idle * 2, 0.05)
    raise TimeoutError(f"worker gave up after {plan.timeout_s:.0f} s without the coordinator finishing")


def _poll_each(clients: list[EdgeClient], stats: WorkerStats) -> str:
    """Poll every client once (no waiting) and do whatever work it is given."""
    done = 0
    secagg: list[tuple[EdgeClient, Task]] = []
    for client in clients:
        task = client.poll(0)
        stats.polls += 1
        if task.kind == TaskKind.DONE:
            done += 1
        elif task.kind is TaskKind.FIT and task.secagg:
            secagg.append((client, task))
        elif task.kind in (TaskKind.FIT, TaskKind.EVALUATE):
            client.handle(task)
    if secagg:   # secure aggregation: a phase closes only when the whole cohort got there, so run them together
        with ThreadPoolExecutor(max_workers=len(secagg), thread_name_prefix="fedort-secagg") as pool:
            list(pool.map(lambda ct: ct[0].handle(ct[1]), secagg))
    return "done" if done == len(clients) else "more"
