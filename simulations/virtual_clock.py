"""Heterogeneous device speeds on a virtual clock: simulated compute time without real sleeping.

A worker whose plan carries per-client speed factors (`--device-speed`, simulations.device_speed)
serves its clients as a discrete-event simulation. Each client that gets a FIT task at simulated
time t downloads and trains at once (real compute, which the clock ignores) and holds its update
until t + factor × steps × step_seconds, where steps = local_epochs × ⌈examples / batch⌉ (capped by
a straggler's step limit). Updates are sent in order of those simulated finish times, one at a
time, so the coordinator sees exactly the arrival order the speeds imply; the clock then jumps to
the next finish time. Nothing sleeps, so a run with 10× slower devices takes no longer in real
time. When no update is in flight (a synchronous round is being committed) the worker waits, in
real time, for the coordinator to move on; simulated time does not advance meanwhile (server time
is taken as zero).

Synchronous rounds: a round ends at its last update's finish time. Asynchronous versions: the
coordinator commits version v + 1 before acknowledging the K-th update, so the version a client
polls right after is the one it really trains on. `sim_seconds[r]` records the clock when the
coordinator moved past round (or version) r: the simulated wall-clock time of its commit.

Needs every client of the run in one worker (one clock): the runner then starts a single worker.
"""

from __future__ import annotations

import heapq
import math
import time
from typing import TYPE_CHECKING

from fedort.edge_client.client.edge_client import EdgeClient
from fedort.protos.messages import Task, TaskKind
from fedort.simulations.device_speed import compute_seconds

if TYPE_CHECKING:
    from fedort.edge_client.transport.grpc_transport import Transport
    from fedort.simulations.workers.worker import WorkerPlan, WorkerStats


def local_steps(task: Task, examples: int, max_steps: int | None) -> int:
    """Optimizer steps of one local round: epochs × ⌈examples / batch⌉ (batch 0: one per epoch), capped."""
    batch = task.config.batch_size or max(1, examples)
    steps = max(1, task.config.local_epochs) * max(1, math.ceil(examples / batch))
    return min(steps, max_steps) if max_steps else steps


def serve_on_virtual_clock(
    plan: WorkerPlan, transport: Transport, clients: list[EdgeClient], stats: WorkerStats
) -> None:
    """Serve `clients` until the coordinator is DONE or FAILED, sending updates in simulated-time order."""
    if not clients:
        return
    factors = dict(plan.speeds)
    beacon = clients[0].client_id
    deadline = time.monotonic() + plan.timeout_s
    clock, seq = 0.0, 0
    in_flight: list[tuple[float, int, int]] = []  # (finish time, tie-break, client index)
    busy: set[int] = set()
    seen: tuple | None = None
    to_poll: set[int] = set()
    polled_at = 0.0
    while time.monotonic() < deadline:
        round, state = transport.heartbeat(beacon)
        if seen is not None and round > seen[0]:
            for r in range(seen[0], round):
                stats.sim_seconds[r] = clock
        if state.final:
            return
        now = time.monotonic()
        if (round, state) != seen or (not in_flight and now - polled_at >= plan.repoll_s):
            seen, polled_at = (round, state), now  # new round/version or state: everyone idle may have work
            to_poll = set(range(len(clients))) - busy
        if state.hands_out_work:
            for i in sorted(to_poll):
                task = clients[i].poll(0)
                stats.polls += 1
                if task.kind == TaskKind.FIT:
                    clients[i].train(task)
                    steps = local_steps(task, clients[i].data.num_examples, clients[i].config.max_local_steps)
                    factor = factors.get(clients[i].client_id, 1.0)
                    seq += 1
                    heapq.heappush(in_flight, (clock + compute_seconds(factor, steps, plan.step_seconds), seq, i))
                    busy.add(i)
                elif task.kind == TaskKind.EVALUATE:
                    clients[i].handle(task)
            to_poll = set()
        if in_flight:
            finish, _, i = heapq.heappop(in_flight)
            clock = finish
            clients[i].upload()
            busy.discard(i)
            to_poll.add(i)  # async: it may train again on the latest version
            continue
        time.sleep(plan.idle_s)  # nothing in flight: the coordinator is between rounds
    raise TimeoutError(f"worker gave up after {plan.timeout_s:.0f} s without the coordinator finishing")
