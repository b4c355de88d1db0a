"""A simulation worker: hosts many virtual clients in one process over one channel and one session.

Each virtual client is a real `EdgeClient` (same join / poll / download / train / upload code as
a device), sharing the worker's gRPC channel, artifact cache and ORT training session, so an
idle client costs only its id and data indices. The worker holds ONE long-poll for all its
clients (PollTasks), which answers as soon as some of them have work and names only those, so
900 unselected clients cost nothing per round. The clients' work is pipelined: training is
serial (one shared session) while finished updates stream to the coordinator in threads: up to
`uploads_in_flight` of them, and no more vectors than fit in `upload_budget_bytes` (small
updates all go at once and share the coordinator's group commits; 20 MB ones go six at a time, so
the fourth and fifth clients of a worker do not wait for the coordinator to acknowledge the first ones).
Against a coordinator older than PollTasks the worker falls back to
watching the round with a Heartbeat and polling each client once per round (and again every
`repoll_s`, to catch a round the coordinator retried with a new selection).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from fedort.common.errors import FedortError
from fedort.common.invariants import present
from fedort.edge_client.client.cache import ArtifactCache
from fedort.edge_client.client.edge_client import EdgeClient, EdgeConfig, RoundReport
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.edge_client.transport.retry import Backoff, call_with_retry
from fedort.ort.session import SessionConfig, TrainingSession
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
    attack: str = ""  # simulations.attacks spec played by the clients in `attackers`
    attackers: frozenset[str] = frozenset()
    module_factory: Callable | None = None  # EdgeConfig.module_factory of every client (a top-level function)
    stragglers: frozenset[str] = frozenset()  # clients that stop after `straggler_steps` optimizer steps
    straggler_steps: int = 1
    codec: str = "raw"  # EdgeConfig.codec of every client
    topk_warmup: str = "3x45"  # EdgeConfig.topk_warmup of every client
    uploads_in_flight: int = 8  # finished updates streaming while the next client trains ...
    upload_budget_bytes: int = 128 << 20  # ... holding at most this many vector bytes (at least one update)
    poll_wait_ms: int = 10_000  # how long one PollTasks may be held by the coordinator
    speeds: tuple[tuple[str, float], ...] = ()  # (client id, compute-time factor): serve on a virtual clock
    step_seconds: float = 0.01  # simulated seconds of one local step at factor 1


@dataclass
class WorkerStats:
    """What one worker did, per round: fits, examples and bytes moved."""

    fits: int = 0
    evaluations: int = 0
    bytes_up: dict[int, int] = field(default_factory=dict)
    bytes_down: dict[int, int] = field(default_factory=dict)
    train_seconds: float = 0.0
    polls: int = 0
    sim_seconds: dict[int, float] = field(default_factory=dict)  # round -> simulated time of its commit


_preopened: dict[int, TrainingSession] = {}  # intra-op threads -> a session opened before the plan arrived


def preopen_session(folder: str | Path, scratch: Path | None = None, intra_op_threads: int = 1) -> None:
    """Open the shared session from the run's own artifacts (co-located) while the coordinator starts.

    The first join then neither downloads the artifacts nor opens a session before the
    first round; a failure here is left for that join to report."""
    if intra_op_threads in _preopened:
        return
    try:
        _preopened[intra_op_threads] = TrainingSession.from_artifacts(
            folder, config=SessionConfig(intra_op_threads=intra_op_threads), scratch_dir=scratch
        )
    except Exception as e:  # noqa: BLE001 - the join opens its own session and raises what it finds
        log.debug("pre-opening the session from %s: %s", folder, e)


def run_worker(plan: WorkerPlan) -> WorkerStats:
    """Join every client of the plan, then serve their tasks until the coordinator is done."""
    stats = WorkerStats()
    transport = Transport(ChannelConfig(plan.address, insecure=True), cancellable=False)
    cache = ArtifactCache(plan.cache_dir)
    arrays = ClientArrays(plan.source)
    try:
        clients = join_clients(
            plan, transport, cache, arrays, stats, session=_preopened.pop(plan.intra_op_threads, None)
        )
        if clients:  # the vectors alive at once (updates in flight + the one training; under secure aggregation
            # every client holds its update through the protocol) are reused round after round, not remapped
            clients[0].session.recycle_buffers(max(_upload_limit(plan, clients), len(clients)) + 1)
        if plan.speeds:
            from fedort.simulations.virtual_clock import serve_on_virtual_clock

            serve_on_virtual_clock(plan, transport, clients, stats)
        else:
            serve_clients(plan, transport, clients, stats)
    finally:
        transport.close()
    return stats


class _Ledger:
    """Counts a worker's fits and bytes per round from its clients' reports."""

    def __init__(self, stats: WorkerStats) -> None:
        self.stats = stats
        self.vector_bytes = 0
        self._lock = threading.Lock()  # reports arrive from the upload threads too

    def __call__(self, report: RoundReport) -> None:
        with self._lock:
            self._count(report)

    def _count(self, report: RoundReport) -> None:
        s = self.stats
        if report.kind != "fit":
            s.evaluations += 1
            return
        s.fits += 1
        s.train_seconds += report.seconds
        s.bytes_up[report.round] = s.bytes_up.get(report.round, 0) + (report.bytes_up or self.vector_bytes)
        if not report.vector_cached:
            s.bytes_down[report.round] = s.bytes_down.get(report.round, 0) + (report.bytes_down or self.vector_bytes)


def join_clients(
    plan: WorkerPlan,
    transport: Transport,
    cache: ArtifactCache,
    arrays: ClientArrays,
    stats: WorkerStats,
    session: TrainingSession | None = None,
) -> list[EdgeClient]:
    """Join every virtual client; unless `session` is given (checked against the coordinator's model
    at the first join), the first one fetches the artifacts and opens the shared session."""
    ledger = _Ledger(stats)
    clients: list[EdgeClient] = []
    for vc in plan.clients:
        config = EdgeConfig(
            coordinator=plan.address,
            name=vc.client_id,
            client_id=vc.client_id,
            cache_dir=plan.cache_dir,
            insecure=True,
            heartbeats=False,
            persist_identity=False,
            leave_on_stop=False,
            poll_wait_ms=0,
            intra_op_threads=plan.intra_op_threads,
            backoff=Backoff(give_up_after_s=plan.timeout_s),
            update_hook=parse_attack(plan.attack) if vc.client_id in plan.attackers else None,
            module_factory=plan.module_factory,
            max_local_steps=plan.straggler_steps if vc.client_id in plan.stragglers else None,
            codec=plan.codec,
            topk_warmup=plan.topk_warmup,
        )
        client = EdgeClient(
            config, transport=transport, session=session, data=arrays.for_client(vc), cache=cache, on_report=ledger
        )
        client.join()
        session = client.session
        ledger.vector_bytes = present(client.manifest, "the joined client's manifest").parameter_count * 4
        clients.append(client)
    return clients


def serve_clients(plan: WorkerPlan, transport: Transport, clients: list[EdgeClient], stats: WorkerStats) -> None:
    """Serve the joined clients' tasks until the coordinator is DONE or FAILED (or `plan.timeout_s` passes)."""
    if not clients:
        return
    deadline = time.monotonic() + plan.timeout_s
    done: set[str] = set()
    backoff = Backoff(give_up_after_s=plan.timeout_s)
    # secure aggregation: one thread per selected client's protocol run, kept across rounds (threads start on demand)
    with (
        ThreadPoolExecutor(max(1, plan.uploads_in_flight), thread_name_prefix="fedort-upload") as uploads,
        ThreadPoolExecutor(len(clients), thread_name_prefix="fedort-secagg") as secagg,
    ):
        while time.monotonic() < deadline:
            ids = [c.client_id for c in clients if c.client_id not in done]
            try:
                _, state, tasks = call_with_retry(
                    lambda: transport.poll_tasks(ids, clients[0].model_id, plan.poll_wait_ms),  # noqa: B023 - called at once
                    backoff,
                    what="PollTasks",
                )
            except FedortError as e:
                if getattr(e, "code", None) != "UNIMPLEMENTED" or stats.polls:
                    raise
                log.info("the coordinator predates PollTasks; polling each client")
                return _serve_by_heartbeat(plan, transport, clients, stats, deadline)
            stats.polls += 1
            _work(plan, clients, tasks, done, uploads, secagg)
            if len(done) == len(clients) or state.final:
                return
            if not tasks:  # the hold ran out (or the coordinator is stopping): do not spin
                time.sleep(plan.idle_s)
    raise TimeoutError(f"worker gave up after {plan.timeout_s:.0f} s without the coordinator finishing")


def _work(
    plan: WorkerPlan,
    clients: list[EdgeClient],
    tasks: dict,
    done: set[str],
    uploads: ThreadPoolExecutor,
    secagg: ThreadPoolExecutor,
) -> None:
    """Do the polled tasks: train one client after another, each update uploaded while the next trains.

    Secure aggregation: a phase closes only when the whole cohort got there, so every masked
    upload (the client's whole protocol run) gets its own thread of `secagg` (one per client),
    started before any client trains: the keys are advertised and shared while they train, and
    each masks once its own training ended."""
    inflight: list[Future] = []
    masked: list[Future] = []  # never waited on inside the loop: they finish only with the whole cohort
    _train_and_upload(clients, tasks, done, uploads, _upload_limit(plan, clients), secagg, inflight, masked)
    for f in inflight + masked:
        f.result()


def _upload_limit(plan: WorkerPlan, clients: list[EdgeClient]) -> int:
    """How many trained updates may be uploading at once: `uploads_in_flight`, fewer if their vectors
    would exceed `upload_budget_bytes` (at least one)."""
    vector_bytes = 4 * present(clients[0].manifest, "the joined client's manifest").parameter_count if clients else 1
    return max(1, min(plan.uploads_in_flight, plan.upload_budget_bytes // max(1, vector_bytes)))


def _train_and_upload(
    clients: list[EdgeClient],
    tasks: dict,
    done: set[str],
    uploads: ThreadPoolExecutor,
    limit: int,
    secagg: ThreadPoolExecutor,
    inflight: list[Future],
    masked: list[Future],
) -> None:
    trained: dict[str, threading.Event] = {}  # secure rounds: set once the client's training ended
    advertised: list[threading.Event] = []
    secure = [c for c in clients if (t := tasks.get(c.client_id)) is not None and t.kind == TaskKind.FIT and t.secagg]
    steps = getattr(clients[0].transport, "secagg_steps", None) if secure else None  # the clients' one batcher
    if steps is not None:
        steps.expect(len(secure))  # one batch of their keys, not one per thread that happened to run first
    for client in secure:  # every secure round starts first: keys are advertised and shared while clients train
        trained[client.client_id], keys = threading.Event(), threading.Event()
        masked.append(
            secagg.submit(client.upload_while_training, tasks[client.client_id], trained[client.client_id], keys)
        )
        advertised.append(keys)
    for keys in advertised:  # set however the upload ends (Uploader.send_while_training): cheap, and one batch
        # then carries them all, where training would hold the threads back
        keys.wait()
    if steps is not None:
        steps.settle()
    for client in clients:
        task = tasks.get(client.client_id)
        if task is None:
            continue
        if task.kind == TaskKind.DONE:
            done.add(client.client_id)
        elif task.kind == TaskKind.FIT and task.secagg:
            try:
                client.train(task)
            finally:
                trained[client.client_id].set()
        elif task.kind == TaskKind.FIT:
            client.train(task)
            while len(inflight) >= limit:  # bounded: each holds one vector
                inflight.pop(0).result()
            inflight.append(uploads.submit(client.upload))
        elif task.kind == TaskKind.EVALUATE:
            client.handle(task)


def _serve_by_heartbeat(
    plan: WorkerPlan, transport: Transport, clients: list[EdgeClient], stats: WorkerStats, deadline: float
) -> None:
    """The pre-PollTasks loop: a Heartbeat watch, then one PollTask per client when the round changes."""
    beacon = clients[0].client_id
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
    if secagg:  # secure aggregation: a phase closes only when the whole cohort got there, so run them together
        with ThreadPoolExecutor(max_workers=len(secagg), thread_name_prefix="fedort-secagg") as pool:
            list(pool.map(lambda ct: ct[0].handle(ct[1]), secagg))
    return "done" if done == len(clients) else "more"
