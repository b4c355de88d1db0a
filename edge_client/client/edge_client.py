"""`EdgeClient`: the device's federated loop — join, fetch, then poll, train, upload until DONE.

    client = EdgeClient(EdgeConfig(coordinator="10.0.0.5:7420", data="client.npz"))
    summary = client.run()          # returns when the coordinator says DONE (or after stop())

`run()` is `join()` followed by `poll()` / `handle(task)` until DONE; the steps are public so an
app or a simulation worker can drive them itself. A FIT task: fetch the round's global vector
(skipped when the cache holds one with the Task's digest) → `from_buffer` → fresh optimizer
state if the task says `reset_optimizer` → `Trainer.fit` with the task's epochs, batch size,
seed and learning rate → `to_buffer` → stream the update with `num_examples` and the logged
metrics. An EVALUATE task evaluates the global vector on local data and reports metrics.

Faults. Every RPC retries UNAVAILABLE / DEADLINE_EXCEEDED / connection loss with jittered
exponential backoff (`retry.Backoff`) and raises anything else. A trained update is kept until
the coordinator acknowledges it, so a coordinator that restarts mid-upload gets it again (a
`duplicate` reply counts as success); a FAILED_PRECONDITION (the round closed meanwhile) drops
it — unless a re-Join shows the coordinator now runs another model, which ends the client with
WrongModelError. A top-k update is journaled on disk, so join() after a device restart sends it
again to learn its outcome (update_codec.py). The client id is saved in the cache per coordinator + device name (+ data
file) and sent on every Join, so a restarted device (or coordinator) keeps its identity; a lock
file stops two running clients from sharing one identity.

The client holds its state and drives three collaborators: `Joiner` (joining.py: Join, identity,
artifacts, session), `ClientCalls` (calls.py: the retried call, re-Join, "stale") and `Uploader`
(uploading.py: how an update leaves the device).

Many clients, one process: pass the same `transport`, `session` and `cache` to every
`EdgeClient` and give each its own `client_id` and in-memory `data` (and `heartbeats=False`,
`persist_identity=False` in its EdgeConfig). A client object then holds only its id, its data
and a few counters; the shared session is reset per task by `from_buffer` (+
`reset_optimizer_state` when the task asks for it — with `reset_optimizer=False` a shared session carries
optimizer moments from one virtual client to the next). The shared cache downloads each round's global vector
once. `handle(WAIT)` sleeps `retry_after_ms`; a driver juggling many clients should skip WAIT tasks instead.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping

import numpy as np

from fedort.common.client_data import ClientData
from fedort.common.errors import ConfigError, FedortError
from fedort.common.invariants import present
from fedort.edge_client.client.cache import ArtifactCache
from fedort.edge_client.client.calls import ClientCalls
from fedort.edge_client.client.config import EdgeConfig
from fedort.edge_client.client.global_vector import fetch_global
from fedort.edge_client.client.heartbeat import Heartbeat
from fedort.edge_client.client.joining import Joiner, Membership
from fedort.edge_client.client.pending import Pending
from fedort.edge_client.client.reports import ReportLog, RoundReport, RunSummary
from fedort.edge_client.client.run_end import final_outcome, leave_quietly
from fedort.edge_client.client.uploading import Sent, Uploader
from fedort.edge_client.training import local_round
from fedort.edge_client.transport.grpc_transport import JoinInfo, Transport
from fedort.edge_client.transport.retry import StoppedError
from fedort.ort.artifacts import Manifest
from fedort.ort.session import TrainingSession
from fedort.protos.messages import Metric, Task, TaskKind

log = logging.getLogger("fedort.edge")


class EdgeClient:
    """One federated participant (see the module docstring).

    `transport`, `session` and `cache` may be shared between clients of one process; a client
    that creates its own transport closes it when `run()` ends (or on `close()`).
    """

    def __init__(
        self,
        config: EdgeConfig,
        *,
        transport: Transport | None = None,
        session: TrainingSession | None = None,
        data: ClientData | Mapping[str, np.ndarray] | None = None,
        cache: ArtifactCache | None = None,
        on_report: Callable[[RoundReport], None] | None = None,
    ) -> None:
        self.config = config
        self._transport = transport
        self._owns_transport = transport is None
        self._session = session
        self._data = ClientData.from_arrays(data) if isinstance(data, Mapping) else data
        self._cache = cache
        self._stop = threading.Event()
        self.stop_reason = ""
        self.client_id = config.client_id
        self.model_id = ""
        self.manifest: Manifest | None = None
        self._calls = ClientCalls(config.backoff, self._stop)
        self._uploader = Uploader(config, self._calls)
        self._joiner: Joiner | None = None
        self._member: Membership | None = None
        self._pending: Pending | None = None
        self._bytes_down = 0
        self._log = ReportLog(on_report)
        self.phase = "idle"  # idle | joining | polling | downloading | training | evaluating | uploading

    # ---- shared resources (created lazily, so a client object stays cheap) -----------------

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            channel = self.config.channel_config()
            channel.check_resolves()  # a host that does not resolve at start is a typo: say so, do not retry
            # bound to the stop event: a stop() that lands while a call is starting cancels that call too
            self._transport = Transport(channel, stop=self._stop)
        return self._transport

    @property
    def cache(self) -> ArtifactCache:
        if self._cache is None:
            self._cache = ArtifactCache(self.config.cache_dir)
        return self._cache

    @property
    def session(self) -> TrainingSession:
        if self._session is None:
            raise ConfigError("the training session exists after join()")
        return self._session

    @property
    def data(self) -> ClientData:
        if self._data is None:
            if self.config.data is None:
                raise ConfigError("no data: set EdgeConfig.data to a .npz file or pass data= to EdgeClient")
            self._data = ClientData.load(self.config.data)
        return self._data

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def reports(self) -> list[RoundReport]:
        """The reports of the tasks handled so far, in order."""
        return self._log.reports

    def _set_phase(self, phase: str) -> None:
        self.phase = phase

    # ---- joining ------------------------------------------------------------------------------

    def join(self) -> JoinInfo:
        """Check the data, join (keeping a saved identity), fetch missing artifacts, open the session.

        Data problems raise DataError before anything is sent when they can be seen without the
        model, or against a known manifest (a shared session's, or the one this coordinator served
        to this device last time). Otherwise the manifest only arrives with the JoinReply: the
        checks then run right after Join, and a client whose data does not fit leaves again.
        A top-k update left unanswered by a previous process is sent again before this returns.
        """
        self.phase = "joining"
        try:
            data = self.data  # model-free checks, before any RPC
            if self._joiner is None:
                self._joiner = Joiner(self.config, self.transport, self.cache, self._calls)
            previous = self._member.encoder if self._member is not None else None
            self._joined(self._joiner.join(data, self._session, previous))
            self._session = self._joiner.open_session(self._member_now(), self._session, self._set_phase)
            self._settle_journal()
            return self._member_now().info
        finally:
            self.phase = "idle"

    def _joined(self, member: Membership) -> None:
        self._member = member
        self.client_id, self.model_id, self.manifest = member.client_id, member.model_id, member.manifest
        self._calls.rejoin = self._rejoin

    def _rejoin(self) -> None:
        self._joined(present(self._joiner, "the joiner").rejoin(self._member_now(), self.data))

    def _member_now(self) -> Membership:
        if self._member is None:
            raise ConfigError("join() first")
        return self._member

    def _settle_journal(self) -> None:
        """Send again the top-k update a previous process journaled but never heard back about: the
        coordinator's answer (accepted or duplicate: counted; FAILED_PRECONDITION: it did not count, see
        update_codec.py) settles the residual the next update adds. A refusal (INVALID_ARGUMENT, e.g.
        the run no longer allows the codec) means it did not count either."""
        member = self._member_now()
        journaled = self._uploader.journaled(member)
        if journaled is None:
            return
        self._pending = journaled
        try:
            self._submit_pending()
        except FedortError as e:
            if getattr(e, "code", None) != "INVALID_ARGUMENT":
                raise
            p, self._pending = self._pending, None
            log.warning(
                "round %d: the coordinator refused the journaled update (%s); keeping it as residual", p.round, e
            )
            member.encoder.settle(present(p.update, "the journaled update"), counted=False)

    # ---- tasks --------------------------------------------------------------------------------

    def poll(self, wait_ms: int | None = None) -> Task:
        """Long-poll for the next task (WAIT, FIT, EVALUATE or DONE)."""
        self._member_now()
        self.phase = "polling"
        wait = self.config.poll_wait_ms if wait_ms is None else wait_ms
        try:
            return self._calls("PollTask", lambda: self.transport.poll(self.client_id, self.model_id, wait))
        except FedortError as e:
            if getattr(e, "code", None) == "FAILED_PRECONDITION":
                self._rejoin()  # raises WrongModelError if the coordinator changed models
            raise
        finally:
            self.phase = "idle"

    def handle(self, task: Task) -> RoundReport | None:
        """Do one task: train and upload (FIT), evaluate and report (EVALUATE), wait (WAIT).

        Returns the report of a FIT or EVALUATE task, None for WAIT and DONE.
        """
        self._member_now()
        if task.kind == TaskKind.FIT:
            return self._fit(task)
        if task.kind == TaskKind.EVALUATE:
            return self._evaluate(task)
        if task.kind == TaskKind.WAIT and task.retry_after_ms:
            self._stop.wait(min(task.retry_after_ms, 30_000) / 1000)
        return None

    def _global_vector(self, task: Task) -> tuple[np.ndarray, bool]:
        """The round's global vector and whether it came from the cache."""
        vector, cached, self._bytes_down = fetch_global(
            task, self._member_now(), self.cache, self._calls, self.transport, self._set_phase
        )
        return vector, cached

    def _heartbeat(self):
        interval = (self._member_now().info.heartbeat_interval_ms or 0) / 1000
        if not self.config.heartbeats or interval <= 0:
            return contextlib.nullcontext()
        return Heartbeat(self.transport, self.client_id, interval)

    def _on_global(self, task: Task, phase: str, work: Callable[[np.ndarray], local_round.LocalResult]):
        """(global vector, whether cached, `work(vector)`): the round's vector fetched, then the local work,
        under heartbeats; a stop that came while downloading ends it before the work starts."""
        with self._heartbeat():
            vector, cached = self._global_vector(task)
            self.phase = phase
            if self._stop.is_set():
                raise StoppedError(f"stopped before {phase} round {task.round}")
            return vector, cached, work(vector)

    def _fit(self, task: Task) -> RoundReport:
        if self._pending is None or self._pending.round != task.round:
            self.train(task)
        return self._submit_pending()  # (trained already if the last upload was not acknowledged)

    def train(self, task: Task) -> None:
        """A FIT task's local work without its upload (fetch the vector, train); `upload()` sends it.

        Split so that a host of many clients can upload one client's update while the next trains.
        """
        member = self._member_now()
        self._pending = None
        started = time.monotonic()
        vector, cached, result = self._on_global(
            task,
            "training",
            lambda vector: local_round.fit(
                self.session,
                vector,
                self.data,
                member.manifest.inputs,
                task.config,
                self.config.module_factory,
                stop=self._stop,
                max_steps=self.config.max_local_steps,
            ),
        )
        self._pending = self._uploader.prepare(task, member, vector, result, started, cached)

    def upload(self) -> RoundReport:
        """Send the update `train()` produced and report the coordinator's answer."""
        if self._pending is None:
            raise ConfigError("upload() needs an update: train(task) first")
        return self._submit_pending()

    def upload_while_training(
        self, task: Task, trained: threading.Event, advertised: threading.Event | None = None
    ) -> RoundReport:
        """A secure-aggregation FIT task's upload, begun before `train(task)` ends in another thread, which sets
        `trained` then (also when it fails): keys are advertised (`advertised` is set) and shared meanwhile, and
        the masking waits for the update (`Uploader.send_while_training`)."""
        member, pending = self._member_now(), lambda: self._pending
        sent, p = self._uploader.send_while_training(
            self.transport, member, task, trained, pending, self._set_phase, advertised
        )
        self._pending = None
        return self._report(p.round, "fit", p.num_examples, p.metrics, p.seconds, p.vector_cached, sent)

    def _submit_pending(self) -> RoundReport:
        p = present(self._pending, "the pending update")
        sent = self._uploader.send(self.transport, self._member_now(), p, self._set_phase)
        self._pending = None  # acknowledged (accepted or duplicate), or the round is gone (stale)
        return self._report(p.round, "fit", p.num_examples, p.metrics, p.seconds, p.vector_cached, sent)

    def _evaluate(self, task: Task) -> RoundReport:
        started = time.monotonic()
        member = self._member_now()
        _, cached, result = self._on_global(
            task,
            "evaluating",
            lambda vector: local_round.evaluate(
                self.session, vector, self.data, member.manifest.inputs, task.config, self.config.module_factory
            ),
        )
        self.phase = "uploading"
        try:
            reply = self._calls.submit(
                f"SubmitEvaluation round {task.round}",
                lambda: self.transport.submit_evaluation(
                    self.client_id, self.model_id, task.round, result.num_examples, result.metrics
                ),
            )
        finally:
            self.phase = "idle"
        seconds = time.monotonic() - started
        return self._report(task.round, "evaluate", result.num_examples, result.metrics, seconds, cached, Sent(reply))

    def _report(
        self, round: int, kind: str, n: int, metrics: Mapping[str, Metric], seconds: float, cached: bool, sent: Sent
    ) -> RoundReport:
        values = {k: m.value for k, m in metrics.items()}
        outcome, message = sent.reply
        bytes_down = 0 if cached else self._bytes_down
        report = RoundReport(
            round, kind, n, values, seconds, outcome, cached, message, sent.codec, sent.bytes_up, bytes_down
        )
        return self._log.add(report)

    # ---- the loop and its end -----------------------------------------------------------------

    def run(self) -> RunSummary:
        """Join (unless joined) and work until the coordinator says DONE or `stop()` is called."""
        outcome = "stopped"
        try:
            if self._member is None:
                self.join()
            while not self._stop.is_set():
                if self._pending is not None:
                    self._submit_pending()
                    continue
                task = self.poll()
                if task.kind == TaskKind.DONE:
                    outcome = final_outcome(self.transport, self.client_id)  # DONE also ends a FAILED run: ask which
                    break
                self.handle(task)
        except FedortError as e:
            if not (self._stop.is_set() and (isinstance(e, StoppedError) or getattr(e, "code", None) == "CANCELLED")):
                raise
            log.info("stopping: %s", e)
        finally:
            self.phase = "idle"
            if outcome != "done" and self._stop.is_set() and self.config.leave_on_stop and self._member is not None:
                self._leave_on_the_way_out(self.stop_reason or "stopped")
            self.close()
        return RunSummary(self.client_id, self.model_id, outcome, list(self.reports), self.stop_reason)

    def stop(self, reason: str = "stopped") -> None:
        """Ask `run()` to end soon: cuts a backoff sleep or a long-poll short (thread- and signal-safe)."""
        self.stop_reason = self.stop_reason or reason
        self._stop.set()
        if self._owns_transport and self._transport is not None:
            self._transport.cancel_inflight()

    def leave(self, reason: str = "leaving") -> None:
        """Tell the coordinator not to select this client until it joins again."""
        self._member_now()
        self._calls("Leave", lambda: self.transport.leave(self.client_id, reason))

    def _leave_on_the_way_out(self, reason: str) -> None:
        """A stopped client's Leave, over its transport (a call meant for after the stop)."""
        leave_quietly(self.transport, self.client_id, reason)

    def close(self) -> None:
        """Close an owned channel and release the saved identity for other processes."""
        if self._owns_transport and self._transport is not None:
            self._transport.close()
        if self._joiner is not None:
            self._joiner.release()


__all__ = ["EdgeClient", "EdgeConfig", "RoundReport", "RunSummary"]
