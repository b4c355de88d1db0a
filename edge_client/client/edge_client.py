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
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedort.common.client_data import ClientData
from fedort.common.errors import ConfigError, FedortError, NotFoundError, ProtocolError
from fedort.common.faults import fault_point
from fedort.common.invariants import present
from fedort.edge_client.client.cache import ArtifactCache, IdentityLock
from fedort.edge_client.client.config import EdgeConfig
from fedort.edge_client.client.heartbeat import Heartbeat
from fedort.edge_client.client.joining import Joining
from fedort.edge_client.client.pending import Pending
from fedort.edge_client.client.reports import RoundReport, RunSummary
from fedort.edge_client.client.run_end import final_outcome
from fedort.edge_client.training import local_round
from fedort.edge_client.training.guards import check_finite
from fedort.edge_client.transport.grpc_transport import JoinInfo, SubmitResult, Transport
from fedort.edge_client.transport.retry import StoppedError, call_with_retry
from fedort.edge_client.uploads.local_dp import LocalDP
from fedort.edge_client.uploads.resumable import ResumableSender
from fedort.edge_client.uploads.update_codec import UpdateEncoder
from fedort.ort.artifacts import Manifest
from fedort.ort.session import TrainingSession
from fedort.protos.messages import Metric, Task, TaskKind
from fedort.protos.vector_stream import CHUNK_BYTES, vector_digest

log = logging.getLogger("fedort.edge")


class EdgeClient(Joining):
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
        self._on_report = on_report
        self._stop = threading.Event()
        self.stop_reason = ""
        self.client_id = config.client_id
        self.model_id = ""
        self.manifest: Manifest | None = None
        self._join: JoinInfo | None = None
        self._pending: Pending | None = None
        self._encoder: UpdateEncoder | None = None
        self._bytes_down = 0
        self._identity_lock: IdentityLock | None = None
        self.reports: list[RoundReport] = []
        self.phase = "idle"  # idle | joining | polling | downloading | training | evaluating | uploading

    # ---- shared resources (created lazily, so a client object stays cheap) -----------------

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            channel = self.config.channel_config()
            channel.check_resolves()  # a host that does not resolve at start is a typo: say so, do not retry
            self._transport = Transport(channel)
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

    # ---- plumbing -----------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """`fn()` with retries; an 'unknown client' (coordinator lost our row) re-joins once."""
        try:
            return call_with_retry(fn, self.config.backoff, what=what, stop=self._stop)
        except NotFoundError as e:
            if "unknown client" not in str(e) or self._join is None:
                raise
            log.warning("coordinator does not know %s any more; joining again", self.client_id)
            self._rejoin()
            return call_with_retry(fn, self.config.backoff, what=what, stop=self._stop)

    # ---- tasks --------------------------------------------------------------------------------

    def poll(self, wait_ms: int | None = None) -> Task:
        """Long-poll for the next task (WAIT, FIT, EVALUATE or DONE)."""
        self._require_joined()
        self.phase = "polling"
        wait = self.config.poll_wait_ms if wait_ms is None else wait_ms
        try:
            return self._call("PollTask", lambda: self.transport.poll(self.client_id, self.model_id, wait))
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
        self._require_joined()
        if task.kind == TaskKind.FIT:
            return self._fit(task)
        if task.kind == TaskKind.EVALUATE:
            return self._evaluate(task)
        if task.kind == TaskKind.WAIT and task.retry_after_ms:
            self._stop.wait(min(task.retry_after_ms, 30_000) / 1000)
        return None

    def _require_joined(self) -> None:
        if self._join is None:
            raise ConfigError("join() first")

    def _global_vector(self, task: Task) -> tuple[np.ndarray, bool]:
        """The round's global vector and whether it came from the cache."""
        length = present(self.manifest, "the manifest (join sets it)").parameter_count
        if task.vector_length and task.vector_length != length:
            raise ProtocolError(f"round {task.round} vector has {task.vector_length} elements, the model {length}")
        if task.vector_sha256:
            cached = self.cache.get_vector(task.vector_sha256, length)
            if cached is not None:
                return cached, True
        self.phase = "downloading"
        local = (
            self._local.read_global(task.vector_sha256, length, task.vector_blake3) if self._local is not None else None
        )
        if local is not None:  # co-located with the coordinator: read, not downloaded (edge_client.local_vectors)
            vector, self._bytes_down = local, 0
        else:
            base = self.cache.latest_vector()  # the coordinator may send the delta against it
            vector, self._bytes_down = self._call(
                f"DownloadVector round {task.round}",
                lambda: self.transport.download_global(
                    self.client_id,
                    self.model_id,
                    task.round,
                    expected_length=length,
                    expected_sha256=task.vector_sha256 or None,
                    expected_blake3=task.vector_blake3 or None,
                    base=base if base and len(base[1]) == length else None,
                ),
            )
        check_finite(vector, task.round)  # before caching: a poisoned vector must not be trained on or kept
        self.cache.put_vector(task.vector_sha256 or vector_digest(vector), vector, persist=local is None)
        return vector, False

    def _heartbeat(self):
        interval = (self._join.heartbeat_interval_ms or 0) / 1000
        if not self.config.heartbeats or interval <= 0:
            return contextlib.nullcontext()
        return Heartbeat(self.transport, self.client_id, interval)

    def _fit(self, task: Task) -> RoundReport:
        if self._pending is None or self._pending.round != task.round:
            self.train(task)
        return self._submit_pending()  # (trained already if the last upload was not acknowledged)

    def train(self, task: Task) -> None:
        """A FIT task's local work without its upload (fetch the vector, train); `upload()` sends it.

        Split so that a host of many clients can upload one client's update while the next trains.
        """
        self._require_joined()
        self._pending = None
        started = time.monotonic()
        with self._heartbeat():
            vector, cached = self._global_vector(task)
            self.phase = "training"
            if self._stop.is_set():  # a stop that came while downloading: do not start training
                raise StoppedError(f"stopped before training round {task.round}")
            result = local_round.fit(
                self.session,
                vector,
                self.data,
                present(self.manifest, "the manifest (join sets it)").inputs,
                task.config,
                self.config.module_factory,
                stop=self._stop,
                max_steps=self.config.max_local_steps,
            )
        trained = present(result.vector, "a FIT task's trained vector")
        if self.config.update_hook is not None:  # research/testing hook (e.g. a simulated Byzantine client)
            trained = np.ascontiguousarray(self.config.update_hook(task, vector, trained), dtype=np.float32)
        if self.config.local_dp_clip is not None:  # local DP: nothing leaves the device unclipped or noiseless
            local_dp = LocalDP(float(self.config.local_dp_clip), float(self.config.local_dp_noise))
            trained = local_dp(task, vector, trained)
        if task.secagg:  # secure aggregation: only a masked vector leaves the device, in upload()
            self._pending = Pending(
                task.round,
                None,
                result.num_examples,
                dict(result.metrics),
                time.monotonic() - started,
                cached,
                secagg=(task, vector, trained),
            )
            return
        encoder = present(self._encoder, "the update encoder (join sets it)")
        update = encoder.encode(
            vector, task.vector_sha256, trained, task.config.seed, task.round, result.num_examples, result.metrics
        )  # top-k on disk: journaled here
        self._pending = Pending(
            task.round, update, result.num_examples, dict(result.metrics), time.monotonic() - started, cached
        )

    def upload(self) -> RoundReport:
        """Send the update `train()` produced and report the coordinator's answer."""
        if self._pending is None:
            raise ConfigError("upload() needs an update: train(task) first")
        return self._submit_pending()

    def _submit_pending(self) -> RoundReport:
        p = present(self._pending, "the pending update")
        join = present(self._join, "the join (join() first)")
        chunk = min(CHUNK_BYTES, join.max_chunk_bytes or CHUNK_BYTES)
        if p.secagg is not None:
            return self._submit_masked(p, chunk)
        u = present(p.update, "the pending update's encoding")
        local_vectors = self._local
        local = local_vectors is not None and u.nbytes >= self.config.local_file_min_bytes
        header, body = u.stream(
            self.client_id,
            self.model_id,
            p.round,
            p.num_examples,
            p.metrics,
            chunk,
            join.update_digests,
            digested=not local,
        )  # co-located: hashed as it is written
        # the coordinator may hash a handed-over file (protocol 1.6), unless a restarted device could send this update
        # again as its first attempt (error feedback, journaled): a resend's answer must find it by its digest
        unhashed = join.hashes_local_files and u.residual is None
        if local and local_vectors is not None:
            send = local_vectors.sender(self.transport, header, body, unhashed)
        elif self.config.upload == "resumable":  # a cut link resends one part (edge_client.resumable_upload)
            send = ResumableSender(self.transport, header, body, chunk).send
        else:
            send = functools.partial(self.transport.submit_update, header, body)
        self.phase = "uploading"
        try:
            fault_point("upload.before_send")
            reply = self._submit(f"SubmitUpdate round {p.round}", send)
            fault_point("upload.after_reply")
        finally:
            self.phase = "idle"
        self._pending = None  # acknowledged (accepted or duplicate), or the round is gone (stale)
        encoder = present(self._encoder, "the update encoder (join sets it)")
        encoder.settle(u, counted=reply[0] in ("accepted", "duplicate"))
        return self._report(
            p.round,
            "fit",
            p.num_examples,
            p.metrics,
            p.seconds,
            reply,
            p.vector_cached,
            codec=u.codec,
            bytes_up=u.nbytes,
        )

    def _submit_masked(self, p: Pending, chunk: int) -> RoundReport:
        """Run the secure-aggregation phases for the pending update (edge_client.secagg_flow)."""
        from fedort.edge_client.secagg.flow import SecAggFlow  # its crypto stack loads only for a masked round

        task, vector, trained = present(p.secagg, "the masked round's vectors")
        flow = SecAggFlow(
            self.transport,
            self.client_id,
            self.model_id,
            task,
            self._call,
            self.config.poll_wait_ms,
            announced=present(self._join, "the join (join() first)").update_digests,
            local=self._local,
            local_min_bytes=self.config.local_file_min_bytes,
        )
        self.phase = "secure aggregation"
        try:
            reply = flow.run(vector, trained, p.num_examples, p.metrics, chunk)
        finally:
            self.phase = "idle"
        self._pending = None
        return self._report(p.round, "fit", p.num_examples, p.metrics, p.seconds, reply, p.vector_cached)

    def _submit(self, what: str, fn: Callable[[], SubmitResult]) -> tuple[str, str]:
        """Submit; returns (outcome, message). FAILED_PRECONDITION (round closed, not selected) is 'stale'."""
        try:
            result = self._call(what, fn)
        except FedortError as e:
            if getattr(e, "code", None) != "FAILED_PRECONDITION":
                raise
            self._rejoin()  # a different model on the coordinator is fatal (WrongModelError)
            return "stale", str(e)
        outcome = "duplicate" if result.duplicate else ("accepted" if result.accepted else "rejected")
        return outcome, result.message

    def _evaluate(self, task: Task) -> RoundReport:
        started = time.monotonic()
        with self._heartbeat():
            vector, cached = self._global_vector(task)
            self.phase = "evaluating"
            if self._stop.is_set():
                raise StoppedError(f"stopped before evaluating round {task.round}")
            result = local_round.evaluate(
                self.session,
                vector,
                self.data,
                present(self.manifest, "the manifest (join sets it)").inputs,
                task.config,
                self.config.module_factory,
            )
        self.phase = "uploading"
        try:
            reply = self._submit(
                f"SubmitEvaluation round {task.round}",
                lambda: self.transport.submit_evaluation(
                    self.client_id, self.model_id, task.round, result.num_examples, result.metrics
                ),
            )
        finally:
            self.phase = "idle"
        return self._report(
            task.round, "evaluate", result.num_examples, result.metrics, time.monotonic() - started, reply, cached
        )

    def _report(
        self,
        round: int,
        kind: str,
        n: int,
        metrics: Mapping[str, Metric],
        seconds: float,
        reply: tuple[str, str],
        cached: bool,
        codec: str = "",
        bytes_up: int = 0,
    ) -> RoundReport:
        outcome, message = reply
        report = RoundReport(
            round,
            kind,
            n,
            {k: m.value for k, m in metrics.items()},
            seconds,
            outcome,
            cached,
            message,
            codec,
            bytes_up,
            0 if cached else self._bytes_down,
        )
        self.reports.append(report)
        # with an on_report callback (the CLI prints each round) the log line would say it a second time
        (log.debug if self._on_report is not None else log.info)(
            "round %d %s: %d examples, %.2f s, %s%s",
            round,
            kind,
            n,
            seconds,
            outcome,
            f" ({message})" if message and message != outcome else "",
        )
        if self._on_report is not None:
            self._on_report(report)
        return report

    # ---- the loop and its end -----------------------------------------------------------------

    def run(self) -> RunSummary:
        """Join (unless joined) and work until the coordinator says DONE or `stop()` is called."""
        outcome = "stopped"
        try:
            if self._join is None:
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
            if outcome != "done" and self._stop.is_set() and self.config.leave_on_stop and self._join is not None:
                self._leave_quietly(self.client_id, self.stop_reason or "stopped")
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
        self._require_joined()
        self._call("Leave", lambda: self.transport.leave(self.client_id, reason))

    def _leave_quietly(self, client_id: str, reason: str) -> None:
        """Best-effort Leave with a short deadline (on the way out, never raises)."""
        transport = self._transport or Transport(self.config.channel_config())
        try:
            transport.leave(client_id, reason, timeout_s=2.0)
        except FedortError as e:
            log.debug("leave failed: %s", e)
        finally:
            if transport is not self._transport:
                transport.close()

    def close(self) -> None:
        """Close an owned channel and release the saved identity for other processes."""
        if self._owns_transport and self._transport is not None:
            self._transport.close()
        if self._identity_lock is not None:
            self._identity_lock.release()
            self._identity_lock = None


__all__ = ["EdgeClient", "EdgeConfig", "RoundReport", "RunSummary"]
