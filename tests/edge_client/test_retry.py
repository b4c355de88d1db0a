"""edge_client.retry: which failures are retried, how long the waits are, when it gives up."""

from __future__ import annotations

import random
import socket
import threading
from concurrent import futures

import grpc
import pytest

from fedort.common.clock import ManualClock, use
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.common.errors import FedortError, UnavailableError
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.common.errors import FedortError, UnavailableError
from fedort.protos.status_codes import from_rpc_error
from fedort.edge_client.transport.retry import Backoff, StoppedError, call_with_retry, is_retryable
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport


class _RpcError(grpc.RpcError):
    """A status as a real grpc client sees it (code() and details())."""

    def __init__(self, code: grpc.StatusCode, details: str = "test") -> None:
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


def _failing(code: grpc.StatusCode, times: int):
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] <= times:
            raise from_rpc_error(_RpcError(code, f"attempt {calls['n']}"))
        return "ok"

    return fn, calls


FAST = Backoff(initial_s=0.001, max_delay_s=0.005, give_up_after_s=5.0)


def test_ceiling_grows_exponentially_up_to_the_cap():
    b = Backoff(initial_s=0.5, multiplier=2.0, max_delay_s=3.0)
    assert [b.ceiling(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert b.ceiling(10_000) == 3.0  # no overflow after a very long outage


def test_delays_are_full_jitter_between_zero_and_the_ceiling():
    b = Backoff(initial_s=1.0, multiplier=2.0, max_delay_s=8.0)
    gen = b.delays(random.Random(1))
    samples = [next(gen) for _ in range(200)]
    for n, d in enumerate(samples):
        assert 0.0 <= d <= b.ceiling(n)
    late = samples[10:]
    assert max(late) > 6.0 and min(late) < 2.0  # spread over the whole range, not clustered at the cap


def test_unavailable_is_retried_until_it_succeeds():
    fn, calls = _failing(grpc.StatusCode.UNAVAILABLE, times=3)
    retries = []
    assert call_with_retry(fn, FAST, what="Poll", on_retry=lambda n, e, d: retries.append(n)) == "ok"
    assert calls["n"] == 4 and retries == [1, 2, 3]


@pytest.mark.parametrize("code", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED])
def test_other_transient_codes_are_retried(code):
    fn, calls = _failing(code, times=1)
    assert call_with_retry(fn, FAST, what="Poll") == "ok"
    assert calls["n"] == 2


@pytest.mark.parametrize("code", [
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED,
])
def test_errors_retrying_cannot_fix_are_raised_at_once(code):
    fn, calls = _failing(code, times=10)
    with pytest.raises(FedortError) as info:
        call_with_retry(fn, FAST, what="Join")
    assert calls["n"] == 1
    assert info.value.code == code.name and "attempt 1" in str(info.value)


def test_gives_up_after_the_time_budget_naming_the_call():
    fn, calls = _failing(grpc.StatusCode.UNAVAILABLE, times=10**9)
    with use(ManualClock()) as clock:          # the backoff sleeps move this clock, not the test's time
        started = clock.monotonic()
        with pytest.raises(UnavailableError, match=r"SubmitUpdate round 2 failed \d+ time\(s\) over .* giving up"):
            call_with_retry(fn, Backoff(initial_s=1.0, max_delay_s=10.0, give_up_after_s=300.0),
                            what="SubmitUpdate round 2", rng=random.Random(0))
        spent = clock.monotonic() - started
    assert calls["n"] > 10 and 0 < spent <= 300.0   # it waited between attempts, and never past the budget


def test_gives_up_after_max_attempts():
    fn, calls = _failing(grpc.StatusCode.UNAVAILABLE, times=10**9)
    with pytest.raises(UnavailableError):
        call_with_retry(fn, Backoff(initial_s=0.001, max_delay_s=0.001, give_up_after_s=None, max_attempts=4),
                        what="Poll")
    assert calls["n"] == 4


def test_stop_event_cuts_a_backoff_sleep_short():
    fn, _ = _failing(grpc.StatusCode.UNAVAILABLE, times=10**9)
    stop = threading.Event()
    with use(ManualClock()) as clock:
        started = clock.monotonic()
        with pytest.raises(StoppedError, match="stopped while waiting to retry Poll"):
            # the stop comes as the first 30 s backoff begins (on_retry runs just before the wait)
            call_with_retry(fn, Backoff(initial_s=30.0, max_delay_s=30.0, give_up_after_s=None), what="Poll",
                            stop=stop, rng=random.Random(0), on_retry=lambda n, e, d: stop.set())
        assert clock.monotonic() == started        # none of the backoff was waited out


def test_a_stop_event_set_during_a_real_backoff_ends_it():
    fn, _ = _failing(grpc.StatusCode.UNAVAILABLE, times=10**9)
    stop = threading.Event()
    timer = threading.Timer(0.05, stop.set)
    timer.start()
    with pytest.raises(StoppedError, match="stopped while waiting to retry Poll"):   # else the 1 h backoff hangs
        call_with_retry(fn, Backoff(initial_s=3600.0, max_delay_s=3600.0, give_up_after_s=None), what="Poll",
                        stop=stop, rng=random.Random(0))
    timer.join()


def test_plain_connection_errors_are_retryable_but_bugs_are_not():
    assert is_retryable(ConnectionResetError()) and is_retryable(TimeoutError())
    assert not is_retryable(ValueError("bug")) and not is_retryable(KeyError("bug"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_coordinator_that_is_not_there_is_unavailable_and_retried():
    transport = Transport(ChannelConfig(f"127.0.0.1:{_free_port()}", insecure=True, rpc_timeout_s=2.0))
    try:
        with pytest.raises(UnavailableError, match="Status failed .* giving up.*UNAVAILABLE"):
            call_with_retry(transport.status, Backoff(initial_s=0.05, max_delay_s=0.1, give_up_after_s=0.5),
                            what="Status")
    finally:
        transport.close()


class _StatusOnly(pb_grpc.CoordinatorServicer):
    def Status(self, request, context):
        return pb.StatusReply(model_id="m", state="TRAINING", current_round=1, total_rounds=3)


def test_a_coordinator_that_comes_up_late_is_reached_by_retrying():
    port = _free_port()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_CoordinatorServicer_to_server(_StatusOnly(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    timer = threading.Timer(0.5, server.start)
    transport = Transport(ChannelConfig(f"127.0.0.1:{port}", insecure=True, rpc_timeout_s=2.0))
    try:
        timer.start()
        status = call_with_retry(transport.status, Backoff(initial_s=0.05, max_delay_s=0.2, give_up_after_s=10),
                                 what="Status")
        assert status.model_id == "m" and status.current_round == 1
    finally:
        timer.cancel()
        transport.close()
        server.stop(None)
