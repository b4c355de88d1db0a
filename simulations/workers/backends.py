"""Where simulation workers run: local processes, or Ray tasks on a local instance or a cluster.

ORT's training bindings hold the GIL, so simulated clients get parallelism only from separate
processes. Both backends run the same `run_worker(plan)`; a backend only decides where.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fedort.common.errors import ConfigError, FedortError

if TYPE_CHECKING:  # the worker module (ONNX Runtime, gRPC) loads only where a worker runs or is planned
    from pathlib import Path

    from fedort.simulations.config import SimulationConfig
    from fedort.simulations.workers.worker import WorkerPlan, WorkerStats

log = logging.getLogger("fedort.sim")


class Backend(Protocol):
    def start(self, plans: Sequence[WorkerPlan]) -> None: ...
    def results(self) -> list[WorkerStats] | None: ...  # None while workers still run; raises a worker's error
    def stop(self) -> None: ...
    # the run's artifacts exist: workers may open them early, keeping the session's files under `scratch`
    def preload(self, artifacts: Path, scratch: Path) -> None: ...


class WorkerFailed(FedortError):
    """A simulation worker process ended with an error."""


def _warm() -> None:
    """Import what a worker needs (ORT, gRPC, the client stack) before it has a plan.

    The pool's initializer, so it runs in every worker process as it starts (a task would be
    taken by whichever process is up first, leaving the other to import once its plan arrives).
    An import error is left for `run_worker` to raise, where it reaches the run as a WorkerFailed.
    A forked worker drops the parent's log handler and level, so it logs as a spawned one does."""
    root = logging.getLogger()
    root.handlers = []
    root.setLevel(logging.WARNING)
    try:
        import fedort.edge_client.training.trainer  # noqa: F401
        import fedort.ort.session  # noqa: F401
        import fedort.simulations.workers.worker  # noqa: F401
    except ImportError:
        pass


def _pool(workers: int, method: str = "spawn") -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context(method), initializer=_warm
    )


def _start_method() -> str:
    """ "fork" while this process is still single-threaded and has loaded neither gRPC nor ONNX Runtime
    (Linux), else "spawn". A forked worker skips a fresh interpreter's start and the imports the parent
    already made (numpy, the CLI), and it starts at once instead of later on a busy
    machine. Nothing a worker must not share exists yet: no gRPC channel or thread, no ORT
    session; those it makes itself, as a spawned worker would."""
    import sys
    import threading

    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return "spawn"
    if any(m in sys.modules for m in ("grpc", "onnxruntime", "torch", "ray")):
        return "spawn"
    return "fork"


def _run_worker(plan: WorkerPlan) -> WorkerStats:
    """`run_worker(plan)`, named here so that this module stays light to import (and to pickle by name)."""
    from fedort.simulations.workers.worker import run_worker

    return run_worker(plan)


def _preopen(artifacts: Path, scratch: Path) -> None:
    from fedort.simulations.workers.worker import preopen_session

    preopen_session(artifacts, scratch)


class LocalBackend:
    """One process per worker plan: spawned, or forked before this process loads gRPC or ORT (never after)."""

    def __init__(self) -> None:
        self._pool: cf.ProcessPoolExecutor | None = None
        self._futures: list[cf.Future] = []

    def prepare(self, workers: int) -> None:
        """Start the worker processes now, so their imports overlap the run's preparation."""
        self._pool = _pool(workers, _start_method())
        # a spawn pool starts a process per task submitted while none is idle (a fork pool starts all
        # at the first): one task each
        self._futures = [self._pool.submit(os.getpid) for _ in range(workers)]

    def preload(self, artifacts: Path, scratch: Path) -> None:
        """Workers open the ORT session from `artifacts` while the coordinator starts (one task each; a
        process that takes two opens once, one that takes none opens at its first join); its files go under
        `scratch`, in the run's folder."""
        if self._pool is not None:
            for _ in range(self._pool._max_workers):  # type: ignore[attr-defined]  # typeshed omits the private count
                self._pool.submit(_preopen, artifacts, scratch)

    def start(self, plans: Sequence[WorkerPlan]) -> None:
        if self._pool is not None and self._pool._max_workers != len(plans):  # type: ignore[attr-defined]  # as above
            self._pool.shutdown(wait=False)  # prepared for another count (e.g. a data folder with fewer clients)
            self._pool = None
        if self._pool is None:
            self._pool = _pool(len(plans))
        self._futures = [self._pool.submit(_run_worker, p) for p in plans]

    def results(self) -> list[WorkerStats] | None:
        for f in self._futures:
            if f.done() and f.exception() is not None:
                raise WorkerFailed(f"a simulation worker failed: {f.exception()}") from f.exception()
        if all(f.done() for f in self._futures):
            return [f.result() for f in self._futures]
        return None

    def stop(self) -> None:
        if self._pool is not None:
            for f in self._futures:
                f.cancel()
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                if proc.is_alive():
                    proc.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class RayBackend:
    """Each worker plan is a Ray task (1 CPU); a local Ray instance unless `address` names a cluster."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("the ray backend needs Ray: pip install 'fedort[ray]'") from None
        self._ray = ray
        self._address = address
        self._num_cpus = num_cpus
        self._refs: list = []
        self._started_ray = False
        self._temp_dir: str | None = None  # the local instance's own session folder (ray_cleanup)

    def start(self, plans: Sequence[WorkerPlan]) -> None:
        ray = self._ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
            if self._address:
                ray.init(address=self._address, **kwargs)
            else:
                # workers import this project from the driver's environment (same venv, same files)
                self._init_local(num_cpus=self._num_cpus or os.cpu_count(), **kwargs)
            self._started_ray = True
        remote = ray.remote(num_cpus=1, max_retries=0)(_run_worker)
        self._refs = [remote.remote(p) for p in plans]

    def preload(self, artifacts: Path, scratch: Path) -> None:
        """Nothing: a Ray worker (maybe on another host) opens its session at its first join."""

    def _init_local(self, attempts: int = 3, **kwargs) -> None:
        """Start a local Ray instance, trying again a few times: now and then its GCS or raylet
        misses Ray's own start-up timeouts on a busy machine ("Timed out waiting for file
        .../gcs_server_port", "The current node timed out during startup"), raised as
        RuntimeError or a bare Exception."""
        from fedort.simulations.workers.ray_cleanup import temp_dir

        self._temp_dir = temp_dir()
        for attempt in range(1, attempts + 1):
            try:
                self._ray.init(_temp_dir=self._temp_dir, **kwargs)
                return
            except Exception as e:  # noqa: BLE001 - Ray raises bare Exception for these
                log.warning("local Ray did not start (try %d of %d): %s", attempt, attempts, e)
                self._ray.shutdown()
                if attempt == attempts:
                    raise ConfigError(f"could not start a local Ray instance ({attempts} tries): {e}") from e

    def results(self) -> list[WorkerStats] | None:
        ray = self._ray
        ready, _ = ray.wait(self._refs, num_returns=len(self._refs), timeout=0)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception as e:  # RayTaskError wraps the worker's exception
                raise WorkerFailed(f"a Ray simulation worker failed: {e}") from e
        if len(ready) == len(self._refs):
            return list(ray.get(self._refs))
        return None

    def stop(self) -> None:
        """Cancel the workers and end a Ray instance this backend started; idempotent (a second call
        must not touch Ray: any Ray call after the shutdown starts a new local instance)."""
        ray = self._ray
        refs, self._refs = self._refs, []
        for ref in refs if ray.is_initialized() else ():
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already finished
                pass
        if self._started_ray:
            from fedort.simulations.workers import ray_cleanup

            started = ray_cleanup.ray_processes()  # before the shutdown: the workers are still the raylet's
            ray.shutdown()
            self._started_ray = False
            ray_cleanup.end_processes(started)  # workers and agents would linger for up to a minute
        if self._temp_dir is not None:
            from fedort.simulations.workers.ray_cleanup import remove_temp_dir

            remove_temp_dir(self._temp_dir)
            self._temp_dir = None


def make_backend(name: str, *, ray_address: str | None = None, num_cpus: int | None = None) -> Backend:
    if name == "local":
        return LocalBackend()
    if name == "ray":
        return RayBackend(ray_address, num_cpus)
    raise ConfigError(f"unknown backend {name!r}; expected local or ray")


def prepared_backend(cfg: SimulationConfig) -> Backend:
    """The run's backend; local worker processes are spawned at once, so that their start-up
    (interpreter, ONNX Runtime, gRPC) overlaps everything the run does
    before it needs them, the caller's own imports included (call this before importing the runner)."""
    workers = max(1, min(cfg.worker_count, cfg.clients))
    backend = make_backend(cfg.backend, ray_address=cfg.ray_address, num_cpus=workers)
    if isinstance(backend, LocalBackend):
        backend.prepare(workers)
    return backend
