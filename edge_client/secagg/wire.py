"""SecAgg steps of the clients sharing one Transport, coalesced into SecAggBatch calls (protocol 1.3).

A simulation worker runs its selected clients' protocol flows in threads over one Transport, and
in every phase they all send one step at about the same time. `StepBatcher.submit` (behind
`Transport.secagg_step`) gathers the steps that arrive together into one SecAggBatch call: the
first step opens a batch, which is sent as soon as every registered flow (`flow()`, or `expect`ed
before it started) is waiting in the batcher, or LINGER_S after it opened. A batch opened by an
ADVERTISE or an UNMASK_REQUEST step lingers up to HELD_LINGER_S: no answer can come before its
phase closes, which needs that step of every member, so waiting for the other flows costs
nothing, while flows that start (or mask, `secagg_lane`) one after another arrive a few
milliseconds apart: a shorter linger sends many small batches. Steps that come while a batch is
in flight open the next one — a held batch never delays a new one, since a phase may be waiting
for exactly that step.
A batch of one goes as a plain SecAgg call (what a single device always sends), and after a
coordinator answers SecAggBatch with UNIMPLEMENTED (before protocol 1.3) every step is a plain
SecAgg call again, each in its caller's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fedort.common.errors import FedortError
from fedort.protos.status_codes import from_status
from fedort.protos.stubs import fedort_v1_pb2 as pb

LINGER_S = 0.02
HELD_LINGER_S = 0.25
ADVERTISE, UNMASK_REQUEST = 0, 2  # SecAggRequest.Step (edge_client.secagg_flow)
_FALLBACK = object()


class _Batch:
    def __init__(self, linger_s: float) -> None:
        self.linger_s = linger_s
        self.requests: list[pb.SecAggRequest] = []
        self.results: list[Any] = []
        self.done = threading.Event()


class StepBatcher:
    """Coalesces concurrent SecAgg steps sent over `transport` (see the module docstring)."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._cond = threading.Condition()
        self._open: _Batch | None = None
        self._flows = 0  # protocol flows using this transport now (and those `expect` counted before they started)
        self._expected = 0  # flows `expect` counted that have not started yet
        self._waiting = 0  # steps inside submit (in an open batch or one in flight)
        self.batching = True  # False once the coordinator said it has no SecAggBatch
        self.batch_calls = 0  # SecAggBatch calls made (observability: how well steps coalesce)

    @property
    def flows(self) -> int:
        """Protocol flows using this transport now."""
        return self._flows

    def expect(self, n: int) -> None:
        """`n` protocol runs are about to start (a host starting a round's devices together): counted now, so the
        first batch waits for all of them (up to its linger), not only for those whose threads ran first."""
        with self._cond:
            self._expected += n
            self._flows += n

    def settle(self) -> None:
        """Forget the expected runs that never started (they ended before their first step)."""
        with self._cond:
            self._flows -= self._expected
            self._expected = 0
            self._cond.notify_all()

    @contextmanager
    def flow(self) -> Iterator[None]:
        """Counts one device's protocol run, so a batch need not linger for a flow that is not there."""
        with self._cond:
            if self._expected:
                self._expected -= 1  # counted already
            else:
                self._flows += 1
        try:
            yield
        finally:
            with self._cond:
                self._flows -= 1
                self._cond.notify_all()

    def submit(
        self, client_id: str, model_id: str, round: int, step: int, payload: bytes, wait_ms: int
    ) -> tuple[bool, bytes]:
        """One step (held up to wait_ms until its phase closes): (ready, reply payload), or its error."""
        # protoc's .pyi types an enum field as its class; the runtime takes the int
        request = pb.SecAggRequest(
            client_id=client_id,
            model_id=model_id,
            round=round,
            step=step,  # type: ignore[arg-type]
            payload=payload,
        )
        if not self.batching or self._flows <= 1:
            return self._single(request, wait_ms)
        with self._cond:
            self._waiting += 1
            batch, lead = self._open, self._open is None
            if batch is None:
                batch = self._open = _Batch(HELD_LINGER_S if step in (ADVERTISE, UNMASK_REQUEST) else LINGER_S)
            index = len(batch.requests)
            batch.requests.append(request)
            self._cond.notify_all()
        try:
            if lead:
                self._linger_and_send(batch, wait_ms)
            batch.done.wait()
        finally:
            with self._cond:
                self._waiting -= 1
        result = batch.results[index]
        if result is _FALLBACK:
            return self._single(request, wait_ms)
        if isinstance(result, BaseException):
            raise result
        return result

    def _linger_and_send(self, batch: _Batch, wait_ms: int) -> None:
        try:
            with self._cond:
                until = time.monotonic() + batch.linger_s
                while self._waiting < self._flows and (left := until - time.monotonic()) > 0:
                    self._cond.wait(left)
                self._open = None  # closed: later steps open the next batch
            batch.results = self._send(batch.requests, wait_ms)
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear how it ended
            batch.results = [exc] * len(batch.requests)
        finally:
            batch.done.set()

    def _send(self, requests: list[pb.SecAggRequest], wait_ms: int) -> list[Any]:
        if len(requests) == 1:
            return [_FALLBACK]  # alone: a plain SecAgg call, in its own thread
        t = self._transport
        self.batch_calls += 1
        try:
            reply = t.long_poll("SecAggBatch", lambda w: pb.SecAggBatchRequest(steps=requests, wait_ms=w), wait_ms)
        except FedortError as exc:
            if getattr(exc, "code", None) != "UNIMPLEMENTED":
                raise
            self.batching = False  # a coordinator before protocol 1.3
            return [_FALLBACK] * len(requests)
        if len(reply.entries) != len(requests):
            raise FedortError(f"SecAggBatch answered {len(reply.entries)} entries for {len(requests)} steps")
        return [
            from_status(e.error_code, e.error_message) if e.error_code else (e.ready, bytes(e.payload))
            for e in reply.entries
        ]

    def _single(self, request: pb.SecAggRequest, wait_ms: int) -> tuple[bool, bytes]:
        t = self._transport

        def build(w: int) -> pb.SecAggRequest:
            r = pb.SecAggRequest()
            r.CopyFrom(request)
            r.wait_ms = w
            return r

        r = t.long_poll("SecAgg", build, wait_ms)
        return r.ready, bytes(r.payload)
