"""The device's secure-aggregation round for a FIT task whose `secagg` is set.

    d = trained − global;  DP: d ← clip_C(d) + N(0, σ²), σ = z·C/√n     (the coordinator's SecAggTask says)
    ADVERTISE keys ─▶ roster ─▶ SHARE sealed shares ─▶ delivery ─▶ upload masked y (the task's codec:
    secagg-packed:b, or secagg-u64 when the task names none)
    ─▶ UNMASK_REQUEST ─▶ UNMASK (key shares of dropped neighbours, seed shares of survivors)

Each step is one `SecAgg` call that the coordinator holds until the phase closes (ready=false:
send the same request again). The keys need no update: `run_when` starts the round before training
ends (a simulation worker does, `EdgeClient.upload_while_training`) and waits for the update only to
mask. Steps are idempotent, so a call lost to a coordinator restart is simply retried with the same
message. While the device waits for the share delivery, a thread expands
its masks, which need only the roster (`secagg_ahead`; not where one transport carries many devices).
A round under a secure-aggregation scheme this device does not compute (`protos.secagg.scheme`) ends
as `stale` before any step. Nothing but the masked vector leaves the device; its protocol secrets
live in memory only (a device restart drops it from this round). A coordinator
that says the client is no longer part of the round (FAILED_PRECONDITION) or aborted the round
(ABORTED) ends it as `stale`. A neighbour's share bundle that does not open (that neighbour cheated):
under the committed scheme the device stays and names it in its unmask response (`SecAggClient`),
under the older schemes it leaves the round (`stale`), which goes on as after a dropout.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from fedort.common import digests
from fedort.common.dp_noise import clip_to_norm, gaussian
from fedort.common.errors import FedortError
from fedort.common.secagg.errors import PeerShareError
from fedort.common.secagg.messages import Roster, ShareDelivery, UnmaskRequest
from fedort.common.secagg.pack import pack
from fedort.common.secagg.task import SecAggTask
from fedort.edge_client.secagg.ahead import MaskAhead, worth_it
from fedort.edge_client.secagg.client import SecAggClient
from fedort.edge_client.secagg.lane import lane
from fedort.protos.messages import Metric, SubmitResult, Task, UpdateHeader
from fedort.protos.vector_stream import VectorMeta, vector_digest

log = logging.getLogger(__name__)


class MaskInputs(NamedTuple):
    """What the masking step needs of the device's local round: the global vector it trained from, the trained
    vector, its example count and metrics."""

    global_vector: np.ndarray
    trained: np.ndarray
    num_examples: int
    metrics: Mapping[str, Metric]


ADVERTISE, SHARE, UNMASK_REQUEST, UNMASK = 0, 1, 2, 3  # SecAggRequest.Step
ENDS_ROUND = ("FAILED_PRECONDITION", "ABORTED")
MIN_STEP_WAIT_MS = 10_000


def private_delta(
    task: SecAggTask, global_vector: np.ndarray, trained: np.ndarray, rng: np.random.Generator | None = None
) -> np.ndarray:
    """The float64 delta this device masks: clipped and noised first when the round uses DP."""
    delta = np.subtract(trained, global_vector, dtype=np.float64)  # one pass, no float64 copies of either
    if task.dp_clip is not None:
        delta, _ = clip_to_norm(delta, task.dp_clip)
        delta = delta + gaussian(delta.size, task.dp_noise_std, rng)
    return delta


def masked_header(
    client_id: str,
    model_id: str,
    round: int,
    payload: bytes,
    codec: str,
    length: int,
    num_examples: int,
    metrics: Mapping[str, Metric],
    chunk_size: int,
    trained_from_sha256: bytes,
    digest: str = digests.SHA256,
    digested: bool = True,
) -> UpdateHeader:
    """Header of a masked upload: the model's length P, the masked codec, the payload bytes' digest (sha256,
    or BLAKE3 where the coordinator announced it; its value left empty unless `digested`, for a file the
    coordinator hashes itself), and the global vector it was trained from (admission refuses an update that
    names none)."""
    meta = VectorMeta(
        model_id,
        int(round),
        int(length),
        digests.digest(digest, payload) if digested else b"",
        codec=codec,
        chunk_size=int(chunk_size),
        payload_bytes=len(payload),
        digest="" if digest == digests.SHA256 else digest,
    )
    return UpdateHeader(client_id, meta, int(num_examples), dict(metrics), bytes(trained_from_sha256))


class SecAggFlow:
    """One device's protocol run for one round, over `transport` with `call` (retries, stop).

    `announced` = the coordinator's JoinReply.update_digests (the masked payload's digest is BLAKE3 when
    listed). `local` (edge_client.local_vectors.LocalVectors: a device co-located with the coordinator)
    hands a masked payload of at least `local_min_bytes` over as a file, as a plain update would be; only
    masked words are ever written there. (Measured at 100 devices x 100 k values, A/B against streaming:
    coordinator CPU -28 to -31 %, its peak RSS growth 75-84 -> 50-54 MB, device CPU +7 %, round -6 %.)"""

    def __init__(
        self,
        transport: Any,
        client_id: str,
        model_id: str,
        task: Task,
        call: Callable[[str, Callable[[], Any]], Any],
        poll_wait_ms: int = 20_000,
        *,
        announced: Sequence[str] = (),
        local: Any = None,
        local_min_bytes: int = 0,
        coordinator_hashes: bool = False,
    ) -> None:
        self.transport, self.client_id, self.model_id, self.task = transport, client_id, model_id, task
        self.call = call
        self.digest = digests.choose(announced)
        self.local, self.local_min_bytes = local, local_min_bytes
        self.coordinator_hashes = coordinator_hashes  # JoinReply.hashes_local_files: a file goes unhashed first
        self.wait_ms = max(poll_wait_ms, MIN_STEP_WAIT_MS)  # steps are long-polls, even for a client that never waits

    def _step(self, step: int, payload: bytes) -> bytes:
        while True:
            ready, reply = self.call(
                f"SecAgg step {step} round {self.task.round}",
                lambda: self.transport.secagg_step(
                    self.client_id, self.model_id, self.task.round, step, payload, self.wait_ms
                ),
            )
            if ready:
                return reply

    def run(
        self,
        global_vector: np.ndarray,
        trained: np.ndarray,
        num_examples: int,
        metrics: Mapping[str, Metric],
        chunk_size: int,
    ) -> tuple[str, str]:
        """Every phase for this round; (outcome, message) as the client reports an upload."""
        return self.run_when(lambda: MaskInputs(global_vector, trained, num_examples, metrics), chunk_size)

    def run_when(
        self, inputs: Callable[[], MaskInputs], chunk_size: int, advertising: Callable[[], None] = lambda: None
    ) -> tuple[str, str]:
        """`run` begun before the update exists: keys are advertised and shared at once, and `inputs()` (which
        may wait for the device's training to end) is called only once the share delivery is in, to mask.
        `advertising()` is called as the keys go out."""
        steps = getattr(self.transport, "secagg_steps", None)  # the worker's batcher (a test's wrapper has none)
        with steps.flow() if steps is not None else contextlib.nullcontext():
            return self._run(inputs, chunk_size, advertising)

    def _run(
        self, inputs: Callable[[], MaskInputs], chunk_size: int, advertising: Callable[[], None]
    ) -> tuple[str, str]:
        try:
            spec = SecAggTask.from_bytes(self.task.secagg)  # a scheme this device does not compute: SchemeError
            client = SecAggClient(self.client_id, spec.params)
            keys = client.advertise().to_bytes()
            advertising()
            roster = Roster.from_bytes(self._step(ADVERTISE, keys))
            shares = client.share_keys(roster).to_bytes()
            with MaskAhead(client) if worth_it(self.transport) else contextlib.nullcontext():
                delivery = ShareDelivery.from_bytes(self._step(SHARE, shares))  # masks expanded meanwhile
            global_vector, trained, num_examples, metrics = inputs()
            with lane(self.transport):  # devices sharing the transport mask one at a time (secagg_lane)
                weight = spec.weight(num_examples)
                if spec.dp_clip is None:  # the delta is taken block by block as it is encoded
                    masked = client.masked_words(delivery, trained, weight, minus=global_vector)
                else:
                    masked = client.masked_words(delivery, private_delta(spec, global_vector, trained), weight)
                wire = pack(masked, spec.codec)
                del masked  # the words are on the wire: nothing more needs them
            as_file = self.local is not None and len(wire) >= self.local_min_bytes
            header = masked_header(
                self.client_id,
                self.model_id,
                self.task.round,
                wire,
                spec.codec,
                spec.params.length,
                num_examples,
                metrics,
                chunk_size,
                self.task.vector_sha256 or vector_digest(global_vector),
                self.digest,
                digested=not as_file,  # a file: hashed as it is written, or by the coordinator (`LocalVectors.sender`)
            )
            send = (
                self.local.sender(self.transport, header, wire, self.coordinator_hashes)
                if as_file
                else functools.partial(self.transport.submit_update, header, wire)
            )
            try:
                result: SubmitResult | None = self.call(f"SubmitUpdate (masked) round {self.task.round}", send)
            except FedortError as e:
                if getattr(e, "code", None) != "FAILED_PRECONDITION":
                    raise
                # inputs closed: after a lost acknowledgement (coordinator restart) ours may be in;
                # the unmask request says (it is refused to a client whose input is not)
                result = None
            request = UnmaskRequest.from_bytes(self._step(UNMASK_REQUEST, b""))
            self._step(UNMASK, client.unmask(request).to_bytes())
        except PeerShareError as e:  # a neighbour cheated (older schemes): the round goes on without us
            log.warning("round %d: %s", self.task.round, e)
            return "stale", str(e)
        except FedortError as e:
            if getattr(e, "code", None) not in ENDS_ROUND:
                raise
            log.info("round %d: secure aggregation ended for this client: %s", self.task.round, e)
            return "stale", str(e)
        if result is None:
            return "accepted", "masked input counted (its acknowledgement was lost)"
        return ("duplicate" if result.duplicate else "accepted" if result.accepted else "rejected"), result.message
