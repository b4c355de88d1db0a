"""How a worker's StepBatcher groups its devices' SecAgg steps (edge_client/secagg/wire.py): over a recording
transport that answers every SecAggBatch at once, so only the grouping is under test."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from fedort.edge_client.secagg.wire import HELD_LINGER_S, LINGER_S, StepBatcher
from fedort.protos.stubs import fedort_v1_pb2 as pb

ADVERTISE, SHARE = 0, 1


class Recording:
    """A transport that answers every step ready at once and records how many each call carried (a step
    alone goes as a plain SecAgg call: 1)."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def long_poll(self, method, build, wait_ms):
        request = build(wait_ms)
        if method == "SecAgg":
            self.batches.append(1)
            return pb.SecAggReply(ready=True)
        self.batches.append(len(request.steps))
        return pb.SecAggBatchReply(entries=[pb.SecAggBatchEntry(ready=True) for _ in request.steps])


def _devices(steps: StepBatcher, n: int, step: int, stagger_s: float) -> None:
    """n flows, started `stagger_s` apart, each sending one `step` (and each answered ready)."""
    answers: list[tuple[bool, bytes]] = []

    def device(i: int) -> None:
        time.sleep(i * stagger_s)
        with steps.flow():
            answers.append(steps.submit(f"c{i}", "m", 1, step, b"", 1000))

    threads = [threading.Thread(target=device, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert answers == [(True, b"")] * n


def test_expected_devices_that_start_one_after_another_send_their_keys_in_one_batch():
    transport = Recording()
    steps = StepBatcher(transport)
    steps.expect(4)
    _devices(steps, 4, ADVERTISE, stagger_s=2 * LINGER_S)  # each starts after a plain batch would have gone
    assert transport.batches == [4]
    assert steps.flows == 0


def test_shares_are_not_held_for_devices_still_computing_theirs():
    transport = Recording()
    steps = StepBatcher(transport)
    steps.expect(3)
    _devices(steps, 3, SHARE, stagger_s=3 * LINGER_S)  # the key-sharing phase may be waiting for exactly this one
    assert transport.batches == [1, 1, 1]


def test_expected_devices_that_never_start_stop_holding_the_batch_once_settled():
    transport = Recording()
    steps = StepBatcher(transport)
    steps.expect(3)
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        devices = pool.submit(_devices, steps, 2, ADVERTISE, 0.0)
        time.sleep(2 * LINGER_S)
        steps.settle()  # the third ended before its first step
        devices.result(timeout=10)
    assert transport.batches == [2]
    assert time.monotonic() - started < HELD_LINGER_S  # sent at the settle, not after the held linger
    assert steps.flows == 0
