"""The device's grpc channel and how one call runs on it: deadline, token, cancellation, error mapping, redial.

`Calls` owns the channel. A unary (or stream-unary) call runs as a future the owner can cancel from another
thread or a signal handler (`cancel_inflight`); a response stream is cancelled when its reader stops early.
Errors come back as `protos.errors` exceptions (`from_rpc_error`), with two device-side readings: the
coordinator cancelling a call means it is restarting (retryable), and a call that ran out of time moves later
calls to a fresh connection, since the old one may be half-open.

With a `stop` event, a call that starts once the event is set is cancelled as it starts: a stop that came
between a caller's own check and the call's start would otherwise wait out the call's whole deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from fedort.common.errors import FedortError, UnavailableError
from fedort.common.faults import fault_point
from fedort.edge_client.transport.channel import ChannelConfig
from fedort.edge_client.transport.tls_hints import with_plaintext_hint, with_tls_hint
from fedort.protos.status_codes import from_rpc_error
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.update_part import parse_vector_part

#: grpc's details for a call this side cancelled (any other CANCELLED came from the coordinator).
_LOCAL_CANCEL = "Locally cancelled by application!"

#: Longest hold the coordinator grants a long-poll (protocol semantics 3).
MAX_POLL_WAIT_MS = 30_000


class Calls:
    """Calls to the coordinator over one grpc channel (see the module docstring); thread-safe."""

    def __init__(
        self, config: ChannelConfig, channel: grpc.Channel | None, cancellable: bool, stop: threading.Event | None
    ) -> None:
        """Over `channel` (None: a new one from `config`); see the Transport's arguments of the same names."""
        self.config, self.cancellable, self._stop = config, cancellable, stop
        self._channel = channel or config.open_channel()
        self._metadata = config.metadata()
        self._stub = _stub(self._channel)
        self._lock = threading.RLock()  # RLock: cancel_inflight may run in a signal handler
        self._inflight: set = set()
        self._uses: dict[grpc.Channel, int] = {}  # calls in progress per channel (a retired one closes at 0)
        self._closed = False

    @property
    def channel(self) -> grpc.Channel:
        """The channel new calls go over (a redial replaces it)."""
        return self._channel

    def close(self) -> None:
        self.cancel_inflight()
        with self._lock:
            self._closed = True
            channels = {*self._uses, self._channel}
        for channel in channels:
            channel.close()

    def cancel_inflight(self) -> None:
        """Cancel every call in progress (they raise CANCELLED in their callers)."""
        with self._lock:
            calls = list(self._inflight)
        for call in calls:
            call.cancel()

    def unary(self, name: str, request, timeout: float, metadata: tuple = (), after_stop: bool = False):
        """Run a unary (or stream-unary) call as a cancellable future and wait for it (blocking if not cancellable).
        `after_stop`: a call meant for after the stop (the farewell Leave) is not cancelled for it as it starts."""
        call_metadata = (tuple(self._metadata or ()) + tuple(metadata)) or None
        with self._using(name) as method:
            fault_point("transport.before_call")
            if not self.cancellable:
                try:
                    return method(request, timeout=timeout, metadata=call_metadata)
                except grpc.RpcError as e:
                    raise self._error(e) from None
            try:
                future = method.future(request, timeout=timeout, metadata=call_metadata)
            except grpc.RpcError as e:
                raise self._error(e) from None
            self._track(future, after_stop)
            try:
                return future.result()
            except grpc.RpcError as e:
                raise self._error(e) from None
            except grpc.FutureCancelledError:
                raise _cancelled() from None
            finally:
                self._untrack(future)

    def long_poll(self, name: str, request: Callable[[int], object], wait_ms: int):
        """A call the coordinator may hold up to wait_ms (at most MAX_POLL_WAIT_MS), plus the rpc timeout."""
        wait_ms = max(0, min(int(wait_ms), MAX_POLL_WAIT_MS))
        return self.unary(name, request(wait_ms), wait_ms / 1000 + self.config.rpc_timeout_s)

    def stream(self, name: str, request, timeout: float) -> Iterator:
        """The responses of a unary-stream call; the stream is cancelled if the reader stops early."""
        with self._using(name) as method:
            fault_point("transport.before_call")
            try:
                call = method(request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                raise self._error(e) from None
            self._track(call)
            try:
                yield from call
            except grpc.RpcError as e:
                raise self._error(e) from None
            finally:
                call.cancel()  # no-op once complete; frees the stream if the caller stopped early
                self._untrack(call)

    # ---- internals --------------------------------------------------------------------------

    def _track(self, call, after_stop: bool = False) -> None:
        with self._lock:
            self._inflight.add(call)
            stopped = not after_stop and self._stop is not None and self._stop.is_set()
        if stopped:  # registered after the stop's cancel_inflight ran: cancel it here, or it holds to its deadline
            call.cancel()

    def _untrack(self, call) -> None:
        with self._lock:
            self._inflight.discard(call)

    @contextmanager
    def _using(self, name: str) -> Iterator[Any]:  # a grpc multi-callable (untyped)
        """The stub method `name` on the current channel, counted as a call in progress on that channel while
        the block runs; a channel `_redial` retired is closed when its last call ends."""
        with self._lock:
            channel = self._channel
            self._uses[channel] = self._uses.get(channel, 0) + 1
            method = getattr(self._stub, name)
        try:
            yield method
        finally:
            with self._lock:
                self._uses[channel] -= 1
                done = self._uses[channel] == 0 and channel is not self._channel
                if self._uses[channel] == 0:
                    del self._uses[channel]
            if done:
                channel.close()

    def _error(self, e: grpc.RpcError) -> FedortError:
        """`from_rpc_error`, plus: the coordinator cancelling is retryable, a deadline that ran out redials, and a
        TLS failure says what to check."""
        exc = from_rpc_error(e)
        details = (e.details() if hasattr(e, "details") else "") or ""
        if exc.code == "CANCELLED" and details != _LOCAL_CANCEL:
            # the coordinator cancelled the call (it is stopping or restarting), not us: retryable
            return UnavailableError(
                f"UNAVAILABLE: the coordinator cancelled the call ({details}); it is probably restarting"
            )
        if exc.code == "DEADLINE_EXCEEDED":
            self._redial()
        if exc.code == "UNAVAILABLE":
            return with_plaintext_hint(exc, details) if self.config.insecure else with_tls_hint(exc, details)
        return exc

    def _redial(self) -> None:
        """A call ran out of time: later calls go over a new connection, since this one may be half-open (a
        coordinator gone without a reset keeps streams hanging); the old channel closes once its calls ended."""
        with self._lock:
            if self._closed:
                return
            old = self._channel
            self._channel = self.config.open_channel(own_connection=True)
            self._stub = _stub(self._channel)
            idle = old not in self._uses
        if idle:
            old.close()


def _stub(channel: grpc.Channel) -> pb_grpc.CoordinatorStub:
    """The generated stub, but DownloadVector's chunks arrive as memoryviews of the received message
    (protos.update_part.parse_vector_part): no protobuf parse and no `.chunk` copy per ~1 MiB."""
    stub = pb_grpc.CoordinatorStub(channel)
    stub.DownloadVector = channel.unary_stream(
        "/fedort.v1.Coordinator/DownloadVector",
        request_serializer=pb.VectorRequest.SerializeToString,
        response_deserializer=parse_vector_part,
    )
    return stub


def _cancelled() -> FedortError:
    exc = FedortError("CANCELLED: the call was cancelled on this side")
    exc.code = "CANCELLED"
    return exc


__all__ = ["MAX_POLL_WAIT_MS", "Calls"]
