"""The coordinator's early folds (`Uploads.early_fold`, `RoundAggregator.fold_early` / `stale` / `rebuild`):
a co-located raw update is folded in the fold thread while its file is checked, before it counts.

Two cases the refold logic alone does not cover, each against a real coordinator (gRPC on 127.0.0.1:0,
real SQLite): a small inline update counted while an early fold is half-way through the sum is folded
after it, not on the event loop in the middle of it (commit 94bdcaf: two folds into one sum at once
overwrite each other); and an early fold whose round closes before it counts holds the close until it
is done, then is left out of the committed vector (`stale` -> `rebuild` from the acknowledged updates,
`recovery.acknowledged_updates`).

Determinism: the early fold's blocks come from the test (as `LocalVectorDir.take` hands the checked
blocks of the device's file to the same `EarlyFold.fold`); the fold thread stops after the first block
until the test releases it, so "half-way through the sum" is a state the test waits for, not a timing.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

from coordinator_fixtures import (  # noqa: F401
    manual_clock, mlp_artifacts, pass_the_deadline, start_coordinator, stub_client, update_header,
)
from fedort.coordinator import Coordinator
from fedort.coordinator.aggregation import Update
from fedort.coordinator.aggregation.strategies import FedAvg
from fedort.protos.messages import UpdateHeader
from fedort.common.round_state import RoundRowState

WAIT_S = 30.0


class HalfWay:
    """Blocks of a vector whose iteration stops after the first one until `release()` (in the fold thread)."""

    def __init__(self, vector: np.ndarray) -> None:
        self.vector = vector
        self.first_folded = threading.Event()
        self._go = threading.Event()

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        half = len(self.vector) // 2
        yield 0, self.vector[:half]
        self.first_folded.set()                 # the consumer asked for the next block: the first is in the sum
        if not self._go.wait(WAIT_S):
            raise TimeoutError("the test never released the early fold")
        yield half, self.vector[half:]

    def release(self) -> None:
        self._go.set()


async def until(coord: Coordinator, ok: Callable[[], bool], what: str) -> None:
    """Until `ok()` holds (checked at every engine change), at most WAIT_S."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not ok():
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, f"timed out waiting for {what}"
        await coord.engine.wait_change(min(left, 0.5))


async def joined(coord: Coordinator, client, ids: tuple[str, ...]) -> tuple[str, int, np.ndarray]:
    """Every client of `ids` joined, polled its FIT task and downloaded the global vector: (model, round, g)."""
    model = (await client.join(ids[0])).model_id
    for cid in ids[1:]:
        await client.join(cid)
    for cid in ids:
        task = await client.poll(cid, model)
        _, g = await client.download_vector(cid, model, task.round)
    return model, task.round, g


async def start_early_fold(coord: Coordinator, model: str, round: int, x: np.ndarray, n: int,
                           token: object) -> tuple[HalfWay, asyncio.Future]:
    """client-a's raw update `x` folded early, as the co-located path does, stopped half-way through the sum."""
    header = UpdateHeader.from_pb(update_header("client-a", model, round, x, n))
    plan = coord.engine.uploads.early_fold(header, token)    # asked on the loop, as local_file_received asks
    assert plan is not None
    half = HalfWay(x)
    fold = asyncio.ensure_future(plan.run(lambda: plan.fold(half.blocks())))
    if not await asyncio.to_thread(half.first_folded.wait, WAIT_S):
        half.release()
        raise AssertionError("the early fold never started")
    return half, fold


def inline(cid: str, x: np.ndarray, n: int) -> Update:
    return Update(cid, n, "raw", Path(f"{cid}.f32"), np.frombuffer(x.tobytes(), np.uint8))


@pytest.mark.slow
async def test_an_inline_update_counted_during_an_early_fold_is_folded_after_it_not_into_the_middle(
        start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, min_clients=2, round_timeout_s=240)   # a never reports: stays open
    client = stub_client(coord.port)
    model, round, g = await joined(coord, client, ("client-a", "client-b"))
    xa, xb = (g + np.float32(0.5)).astype(np.float32), (g - np.float32(0.25)).astype(np.float32)
    half, fold = await start_early_fold(coord, model, round, xa, 10, token="a")
    try:
        reply = await client.submit("client-b", model, round, xb, 30)    # 38 kB: durable inline, a loop-sized fold
        assert reply.accepted and not reply.duplicate
    finally:
        half.release()
    await asyncio.wait_for(fold, WAIT_S)
    await until(coord, lambda: not coord.engine.uploads.busy, "the folds to finish")
    aggregator = coord.engine.training.aggregator
    aggregator.add(inline("client-a", xa, 10), early="a")   # a's update counts now, as its group commit would say
    expected = FedAvg().new_round(g)                          # a whole, then b: one fold at a time
    expected.fold_early("a", iter([(0, xa)]), 10)
    expected.add(inline("client-b", xb, 30))
    expected.add(inline("client-a", xa, 10), early="a")
    assert aggregator.result().vector.tobytes() == expected.result().vector.tobytes()


@pytest.mark.slow
async def test_an_early_fold_whose_round_closes_before_it_counts_holds_the_close_and_is_left_out(
        start_coordinator, stub_client, manual_clock):
    coord = await start_coordinator(rounds=1, min_clients=2, min_available_clients=3, round_timeout_s=600)
    client = stub_client(coord.port)
    model, round, g = await joined(coord, client, ("client-a", "client-b", "client-c"))
    xa = (g + np.float32(4.0)).astype(np.float32)
    xb, xc = (g + np.float32(0.5)).astype(np.float32), (g - np.float32(0.25)).astype(np.float32)
    assert (await client.submit("client-b", model, round, xb, 10)).accepted
    assert (await client.submit("client-c", model, round, xc, 30)).accepted
    await until(coord, lambda: not coord.engine.uploads.busy, "b's and c's folds")   # only a's fold is left
    half, fold = await start_early_fold(coord, model, round, xa, 50, token="a")
    try:
        await pass_the_deadline(coord, manual_clock)
        await until(coord, lambda: coord.engine.training.closing, "the round's deadline")   # a never counts now
        assert [r.state for r in coord.engine.store.rounds()] == [RoundRowState.OPEN.value]   # the close waits
    finally:
        half.release()
    await asyncio.wait_for(fold, WAIT_S)
    outcome = await asyncio.wait_for(coord.wait_done(), WAIT_S)
    assert outcome.rounds_completed == 1
    expected = FedAvg().new_round(g)
    expected.add(inline("client-b", xb, 10))
    expected.add(inline("client-c", xc, 30))
    assert coord.engine.store.vector_path(round + 1).read_bytes() == expected.result().vector.tobytes()
