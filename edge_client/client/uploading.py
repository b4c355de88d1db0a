"""Sending a trained update and reading the coordinator's answer.

The update travels the cheapest way the coordinator allows: as a file in its vector folder when it is
on this host (`uploads.local_vectors`), as a resumable upload when configured (a cut link resends one
part, `uploads.resumable`), else as one SubmitUpdate stream. A masked round (secure aggregation) runs
its phases instead (`secagg.flow`), so that only a masked vector leaves the device. The encoder then
keeps the error-feedback residual the answer calls for.

Before that, `prepare` turns a round's training result into the update to send: the research hook,
local DP, then the codec (or the vectors a masked round needs).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedort.common.errors import ConfigError
from fedort.common.faults import fault_point
from fedort.common.invariants import present
from fedort.edge_client.client.calls import ClientCalls
from fedort.edge_client.client.config import EdgeConfig
from fedort.edge_client.client.joining import Membership
from fedort.edge_client.client.pending import Pending
from fedort.edge_client.training.local_round import LocalResult
from fedort.edge_client.transport.grpc_transport import Transport
from fedort.edge_client.transport.retry import StoppedError
from fedort.edge_client.uploads.local_dp import LocalDP
from fedort.edge_client.uploads.resumable import ResumableSender
from fedort.protos.messages import Task
from fedort.protos.vector_stream import CHUNK_BYTES

if TYPE_CHECKING:
    from fedort.edge_client.secagg.flow import SecAggFlow

log = logging.getLogger("fedort.edge")


@dataclass(frozen=True)
class Sent:
    """The coordinator's answer to one update: (outcome, message), and what was sent."""

    reply: tuple[str, str]
    codec: str = ""
    bytes_up: int = 0


class Uploader:
    """Sends one client's pending updates over a transport, each call through `calls`."""

    def __init__(self, config: EdgeConfig, calls: ClientCalls) -> None:
        self.config = config
        self.calls = calls

    def prepare(
        self, task: Task, member: Membership, vector: np.ndarray, result: LocalResult, started: float, cached: bool
    ) -> Pending:
        """The update a FIT task's `result` (trained from the global `vector`) sends; a top-k one is journaled.
        Its time counts from `started` (`time.monotonic()`) to the update ready to send."""
        config = self.config
        trained = present(result.vector, "a FIT task's trained vector")
        if config.update_hook is not None:  # research/testing hook (e.g. a simulated Byzantine client)
            trained = np.ascontiguousarray(config.update_hook(task, vector, trained), dtype=np.float32)
        if config.local_dp_clip is not None:  # local DP: nothing leaves the device unclipped or noiseless
            trained = LocalDP(float(config.local_dp_clip), float(config.local_dp_noise))(task, vector, trained)
        n, metrics = result.num_examples, dict(result.metrics)
        if task.secagg:  # secure aggregation: only a masked vector leaves the device, in send()
            seconds = time.monotonic() - started
            return Pending(task.round, None, n, metrics, seconds, cached, secagg=(task, vector, trained))
        update = member.encoder.encode(
            vector, task.vector_sha256, trained, task.config.seed, task.round, n, result.metrics
        )  # top-k on disk: journaled here
        return Pending(task.round, update, n, metrics, time.monotonic() - started, cached)

    def journaled(self, member: Membership) -> Pending | None:
        """The top-k update a previous process journaled but never heard back about, to send again (None: none)."""
        unsettled = member.encoder.unsettled(member.manifest.parameter_count)
        if unsettled is None:
            return None
        entry, update = unsettled
        log.info(
            "round %d: sending again the top-k update whose answer was lost (the device stopped before it "
            "was recorded)",
            entry.round,
        )
        return Pending(entry.round, update, entry.num_examples, entry.metrics, 0.0, False)

    def send(self, transport: Transport, member: Membership, p: Pending, on_phase: Callable[[str], None]) -> Sent:
        """Send `p` and return the answer; the phase is "uploading" (or "secure aggregation") meanwhile."""
        chunk = _chunk(member)
        try:
            if p.secagg is not None:
                on_phase("secure aggregation")
                return Sent(self._masked(transport, member, p, chunk))
            return self._plain(transport, member, p, chunk, on_phase)
        finally:
            on_phase("idle")

    def _plain(
        self, transport: Transport, member: Membership, p: Pending, chunk: int, on_phase: Callable[[str], None]
    ) -> Sent:
        join, local_vectors = member.info, member.local
        u = present(p.update, "the pending update's encoding")
        local = local_vectors is not None and u.nbytes >= self.config.local_file_min_bytes
        header, body = u.stream(
            member.client_id,
            member.model_id,
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
            send = local_vectors.sender(transport, header, body, unhashed)
        elif self.config.upload == "resumable":
            send = ResumableSender(transport, header, body, chunk).send
        else:
            send = functools.partial(transport.submit_update, header, body)
        on_phase("uploading")
        fault_point("upload.before_send")
        reply = self.calls.submit(f"SubmitUpdate round {p.round}", send)
        fault_point("upload.after_reply")
        member.encoder.settle(u, counted=reply[0] in ("accepted", "duplicate"))
        return Sent(reply, u.codec, u.nbytes)

    def _masked(self, transport: Transport, member: Membership, p: Pending, chunk: int) -> tuple[str, str]:
        task, vector, trained = present(p.secagg, "the masked round's vectors")
        return self._flow(transport, member, task).run(vector, trained, p.num_examples, p.metrics, chunk)

    def send_while_training(
        self,
        transport: Transport,
        member: Membership,
        task: Task,
        trained: threading.Event,
        pending: Callable[[], Pending | None],
        on_phase: Callable[[str], None],
        advertised: threading.Event | None = None,
    ) -> tuple[Sent, Pending]:
        """A secure round's `send` begun before its update exists: the keys are advertised (then `advertised` is
        set, or when the run ends before that) and shared at once, and the masking waits until `trained` is set,
        then takes `pending()` (the training's Pending). The answer, and that Pending (an empty one if the round
        ended before training gave one)."""
        from fedort.edge_client.secagg.flow import MaskInputs  # the crypto stack loads only for a masked round

        def inputs() -> MaskInputs:
            trained.wait()
            p = pending()
            if p is None or p.round != task.round or p.secagg is None:
                raise StoppedError(f"round {task.round}: training ended without an update to mask")
            _, vector, update = p.secagg
            return MaskInputs(vector, update, p.num_examples, p.metrics)

        signal = advertised.set if advertised is not None else (lambda: None)
        on_phase("secure aggregation")
        try:
            if not task.secagg:
                raise ConfigError("send_while_training is for secure-aggregation tasks; a plain update is sent trained")
            sent = Sent(self._flow(transport, member, task).run_when(inputs, _chunk(member), signal))
        finally:
            signal()  # the one place that sets it however the run ends
            on_phase("idle")
        trained.wait()  # the protocol may have ended (stale) before it needed the update
        p = pending()
        return sent, p if p is not None and p.round == task.round else Pending(task.round, None, 0, {}, 0.0, False)

    def _flow(self, transport: Transport, member: Membership, task: Task) -> SecAggFlow:
        from fedort.edge_client.secagg.flow import SecAggFlow  # the crypto stack loads only for a masked round

        return SecAggFlow(
            transport,
            member.client_id,
            member.model_id,
            task,
            self.calls,
            self.config.poll_wait_ms,
            announced=member.info.update_digests,
            local=member.local,
            local_min_bytes=self.config.local_file_min_bytes,
            coordinator_hashes=member.info.hashes_local_files,
        )


def _chunk(member: Membership) -> int:
    """The upload chunk size: ours, or the coordinator's smaller limit."""
    return min(CHUNK_BYTES, member.info.max_chunk_bytes or CHUNK_BYTES)


__all__ = ["Sent", "Uploader"]
