"""A local coordinator for simulations and benchmarks: the deployment `Coordinator` in a thread.

    with LocalCoordinator(config) as coordinator:     # serving once the block starts
        run_clients(coordinator.address)             # worker processes, Ray actors, ...
        outcome = coordinator.wait(timeout=600)      # RunOutcome, or None if the time ran out
    timeline = coordinator.timeline()                # every round transition with its time

The coordinator's asyncio loop runs in a daemon thread so the calling thread can drive workers
and progress. After the run is over it keeps answering DONE until `stop` (the end of the
`with` block), so every client hears it.

Clients on this host pass vectors through files (the co-located vector path,
`coordinator.local_vectors`): unless the config names a `local_vector_dir`, it is STATE/local-vectors;
`local_vectors=False` keeps the deployed path (gRPC streams) only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from fedort.common.errors import FedortError
from fedort.common.invariants import present
from fedort.coordinator import Coordinator, CoordinatorConfig, RunOutcome
from fedort.coordinator.state.layout import StateLayout
from fedort.coordinator.state.schema import TransitionRow
from fedort.coordinator.status import round_timeline

log = logging.getLogger("fedort.sim")


class LocalCoordinator:
    """One run of the real coordinator on this machine (see the module docstring)."""

    def __init__(self, config: CoordinatorConfig, *, local_vectors: bool = True) -> None:
        if local_vectors and config.transport.local_vector_dir is None:
            config = config.replace(local_vector_dir=StateLayout(config.state_dir).local_vectors)
        self.config = config
        self.coordinator: Coordinator | None = None
        self.port: int | None = None
        self.outcome: RunOutcome | None = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        self._finished = threading.Event()
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._main, name="fedort-coordinator", daemon=True)

    @property
    def address(self) -> str:
        """host:port the clients connect to (after `start`)."""
        if self.port is None:
            raise FedortError("the local coordinator is not started")
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> int:
        """Recover the state dir and serve; returns the port."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise FedortError(f"the local coordinator did not start within {timeout:g} s")
        if self.error is not None:
            raise self.error
        return present(self.port, "the local coordinator's port")

    def _main(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as e:  # reported to the driving thread
            self.error = e
        finally:
            self._ready.set()
            self._done.set()
            self._loop.close()

    async def _serve(self) -> None:
        self.coordinator = Coordinator(self.config)
        self.port = await self.coordinator.start()
        self._release = asyncio.Event()
        self._ready.set()
        try:
            self.outcome = await self.coordinator.wait_done()
            self._finished.set()
            await self._release.wait()  # keep answering DONE until the workers have heard it
        finally:
            await self.coordinator.stop(grace=1.0)

    @property
    def done(self) -> bool:
        """The run is over (DONE or FAILED) or the coordinator crashed."""
        return self._finished.is_set() or self._done.is_set()

    def wait(self, timeout: float | None = None, poll_s: float = 0.05) -> RunOutcome | None:
        """Until the run is over (or `timeout` s): its outcome, None if the time ran out. Raises a crash."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done and (deadline is None or time.monotonic() < deadline):
            self._finished.wait(poll_s)
        if self.error is not None:
            raise self.error
        return self.outcome

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        loop = self._loop
        if loop is not None and not self._done.is_set() and self._release is not None:
            loop.call_soon_threadsafe(self._release.set)
        elif loop is not None and not self._done.is_set() and self.coordinator is not None:
            try:
                asyncio.run_coroutine_threadsafe(self.coordinator.stop(grace=1.0), loop).result(timeout=15)
            except Exception as e:  # the loop may already be closing
                log.debug("coordinator stop: %s", e)
        if self._thread.is_alive():
            self._thread.join(timeout=15)

    def timeline(self) -> list[TransitionRow]:
        """Every round transition recorded so far (complete once stopped): round, from, to, unix time, why."""
        return round_timeline(self.config.state_dir)

    def __enter__(self) -> LocalCoordinator:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
