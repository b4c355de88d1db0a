"""`Coordinator`: the coordinator as a Python object — state dir, round engine, gRPC server, health.

    coordinator = Coordinator(CoordinatorConfig.from_mapping(dict(artifacts=..., state_dir=..., address="127.0.0.1:0")))
    port = await coordinator.start()        # recovers the state dir, serves, writes config.transport.port_file
    outcome = await coordinator.wait_done() # RunOutcome(state=DONE|FAILED, rounds_completed, message)
    await coordinator.until_devices_told()  # answer devices for up to config.plan.done_grace_s
    await coordinator.stop(grace=5)

or, from code without an event loop of its own, all of that in one blocking call:

    outcome = Coordinator(config).run(on_serving=lambda port: ...)

`start` verifies the artifacts, pins a copy of them in the state dir (the state dir belongs to
that model id), recovers whatever a previous process left (open round replayed from the spool,
missing exports redone) and only then reports SERVING on the standard health service.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from fedort.common.durable import atomic_write
from fedort.common.errors import ConfigError, UnavailableError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.coordinator.aggregation import Strategy
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.round_engine import RoundEngine, RunOutcome
from fedort.coordinator.export.inference import Exporter
from fedort.coordinator.listening import bind_failure, is_loopback, server_credentials, server_options
from fedort.coordinator.rpc.auth import Authenticator
from fedort.coordinator.rpc.call_gate import CallGate
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.coordinator.rpc.malformed import add_servicer
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.rpc.servicer import CoordinatorServicer
from fedort.coordinator.state.layout import StateLayout
from fedort.coordinator.state.lock import StateDirLock
from fedort.coordinator.state.store import StateStore
from fedort.ort.artifacts import ARTIFACT_FILES, MANIFEST, copy_artifacts, load_manifest, verify_artifacts

if TYPE_CHECKING:
    from fedort.coordinator.rpc.web_transport import WebServer

log = logging.getLogger(__name__)

SERVICE_NAME = "fedort.v1.Coordinator"


def pin_artifacts(source: Path, state_dir: Path) -> Path:
    """The coordinator's own verified copy of the artifacts in `state_dir/artifacts` (copied once)."""
    if not source.is_dir():
        raise ConfigError(f"artifacts folder not found: {source}")
    manifest = verify_artifacts(source)
    layout = StateLayout(state_dir)
    pinned = layout.artifacts
    if (pinned / MANIFEST).is_file():
        mine = load_manifest(pinned)
        if mine.model_id != manifest.model_id:
            raise ConfigError(
                f"state dir {state_dir} belongs to model {mine.model_id[:16]}…, but {source} holds model "
                f"{manifest.model_id[:16]}…; use a new --state-dir for a different model"
            )
        verify_artifacts(pinned, mine)
        return pinned
    tmp = layout.artifacts_tmp
    if tmp.exists():
        for f in tmp.iterdir():
            f.unlink()
    copy_artifacts(source, tmp)
    for name in (*ARTIFACT_FILES, MANIFEST):
        with open(tmp / name, "rb") as fh:
            os.fsync(fh.fileno())
    os.replace(tmp, pinned)
    return pinned


class Coordinator:
    """One federated run, served over gRPC from a durable state directory."""

    def __init__(self, config: CoordinatorConfig, *, strategy: Strategy | None = None) -> None:
        """`strategy`: an aggregation chain built in code (a custom transform, combiner or server
        update), used instead of the one `config.aggregation.strategy` names."""
        self.config = config
        self.strategy = strategy
        self.port: int | None = None
        self.engine: RoundEngine | None = None
        self._store: StateStore | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._engine_task: asyncio.Task | None = None
        self._lock = StateDirLock(config.state_dir)
        self.monitoring: Monitoring | None = None
        self.metrics_port: int | None = None
        self.servicer: CoordinatorServicer | None = None  # the one servicer behind the gRPC (and web) port
        self.web: WebServer | None = None  # the web port, with web_address
        self.web_port: int | None = None

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    async def start(self) -> int:
        """Recover the state dir, start serving and the round engine; returns the bound port."""
        if self._server is not None:
            raise UnavailableError("coordinator already started")
        cfg = self.config
        cfg.check_transport_security()
        credentials = server_credentials(cfg)
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()  # before reading anything: a second coordinator on this dir stops here
        try:
            return await self._start(credentials)
        except BaseException:
            if self.monitoring is not None:
                self.monitoring.stop()
            self._lock.release()
            raise

    async def _start(self, credentials: grpc.ServerCredentials | None) -> int:
        cfg = self.config
        # on loopback nobody else can listen or connect from elsewhere, so these are no news there
        warn = log.info if is_loopback(cfg.transport.host_port[0]) else log.warning
        if cfg.access.auth == "open":
            warn("auth is open: any caller may act as any client id (use --auth token outside local tests)")
        if cfg.transport.insecure:
            warn("serving plaintext (--insecure): tokens and updates cross the network unencrypted")
        auth = Authenticator(cfg.access.auth, DeviceStore(cfg.state_dir) if cfg.access.auth == "token" else None)
        if auth.devices is not None and not any(not d.revoked for d in auth.devices.devices()):
            log.warning(
                "no device is enrolled, so no client can join: `fedort coordinator enroll NAME --state-dir %s`",
                cfg.state_dir,
            )
        artifacts = await asyncio.to_thread(pin_artifacts, cfg.artifacts, cfg.state_dir)
        exporter = await asyncio.to_thread(
            Exporter,
            artifacts,
            StateLayout(cfg.state_dir).models,
            cfg.export.eval_data,
            cfg.export.export_external_bytes,
        )
        if cfg.training.prox_mu > 0 and exporter.manifest.optimizer != "sgd":
            raise ConfigError(
                f"--prox-mu {cfg.training.prox_mu:g} (FedProx) needs SGD artifacts, these use "
                f"{exporter.manifest.optimizer}; rebuild with `fedort artifacts build --optimizer sgd`"
            )
        store = StateStore(cfg.state_dir)
        self._store = store
        store.claim(exporter.manifest.model_id, json.dumps(cfg.to_json_dict(), sort_keys=True))
        self.monitoring = Monitoring()
        engine_class = RoundEngine
        if cfg.fedbuff.mode == "async":  # FedBuff versions instead of rounds; its modules load only for such a run
            from fedort.coordinator.fedbuff.engine import AsyncEngine

            engine_class = AsyncEngine
        engine = engine_class(cfg, store, exporter, strategy=self.strategy, monitor=self.monitoring)
        self.engine = engine
        self.monitoring.attach(engine, cfg.state_dir)
        try:
            await engine.recover()  # replay the open round, redo missing exports: before any client is served
        except BaseException:
            store.close()
            self._store = None
            raise

        options = server_options(cfg)
        # token checks and the unauthenticated-call slots run before a request is read (coordinator.call_gate)
        gate = CallGate(auth, cfg.access.unauthenticated_calls, self.monitoring.call_failed)
        server = grpc.aio.server(options=options, interceptors=[gate])
        self.servicer = CoordinatorServicer(engine, artifacts, cfg.transport.download_chunk_bytes, auth=auth)
        add_servicer(
            self.servicer, server, dict(options)["grpc.max_receive_message_length"]
        )  # garbage -> INVALID_ARGUMENT
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        # server reflection: grpcurl-style tools can list and call the services without the .proto
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        host, port = cfg.transport.host_port
        try:
            if credentials is None:
                self.port = server.add_insecure_port(f"{host}:{port}")
            else:
                self.port = server.add_secure_port(f"{host}:{port}", credentials)
        except RuntimeError as e:
            self.port = 0
            reason = f": {e}"
        else:
            reason = ""
        if not self.port:
            store.close()
            self._store = None
            raise ConfigError(
                f"cannot listen on {cfg.transport.address}{bind_failure(host, port)}{reason and f' (gRPC{reason})'}"
            )
        self._server = server
        if cfg.transport.metrics_address:
            try:
                self.metrics_port = self.monitoring.serve(cfg.transport.metrics_address)
            except OSError as e:
                store.close()
                self._store = None
                self._server = None
                raise ConfigError(
                    f"cannot serve metrics on {cfg.transport.metrics_address}: {e.strerror or e}"
                ) from None
        await server.start()
        if (
            cfg.transport.web_address
        ):  # the same servicer for browsers (Connect, gRPC-Web): only then are its packages loaded
            from fedort.coordinator.rpc.web_transport import WebServer

            self.web = WebServer(self.servicer, cfg)
            try:
                self.web_port = await self.web.start()
            except BaseException:
                await server.stop(0)
                store.close()
                self._store = None
                self._server = None
                raise
        self._engine_task = asyncio.create_task(engine.run(), name="fedort-round-engine")
        self._engine_task.add_done_callback(self._engine_stopped)
        for name in ("", SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if cfg.transport.port_file is not None:
            atomic_write(Path(cfg.transport.port_file), f"{self.port}\n".encode())
        log.info(
            "coordinator serving model %s… on %s:%d (%s, auth %s, state dir %s, %d rounds)",
            engine.model_id[:12],
            host,
            self.port,
            "plaintext" if credentials is None else ("mutual TLS" if cfg.transport.tls_client_ca else "TLS"),
            cfg.access.auth,
            cfg.state_dir,
            cfg.plan.rounds,
        )
        return self.port

    def _engine_stopped(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("round engine crashed", exc_info=task.exception())

    async def wait_done(self) -> RunOutcome:
        """Until the run is DONE or FAILED (the server keeps serving until `stop`)."""
        if self.engine is None:
            raise UnavailableError("coordinator not started")
        return await self.engine.wait_done()

    async def until_devices_told(self, stop: asyncio.Event | None = None) -> None:
        """After the run ended: keep serving until every available device has been told DONE and has
        asked whether the run succeeded, or `config.plan.done_grace_s` passed (or `stop` is set)."""
        deadline = asyncio.get_running_loop().time() + self.config.plan.done_grace_s
        engine = present(self.engine, "the serving coordinator's engine")
        while (
            not engine.all_told()
            and asyncio.get_running_loop().time() < deadline
            and not (stop is not None and stop.is_set())
        ):
            await asyncio.sleep(0.1)

    def run(self, *, on_serving: Callable[[int], None] | None = None, grace: float = 5.0) -> RunOutcome:
        """Blocking: start, serve the whole run, answer devices until they know the outcome
        (`until_devices_told`), stop; returns the outcome. `on_serving(port)` is called once the
        server listens (start your devices there). For code without an event loop of its own; inside
        one, use `await start()`, `wait_done()`, `stop()` (or `async with`)."""

        async def whole_run() -> RunOutcome:
            try:
                port = await self.start()
                if on_serving is not None:
                    on_serving(port)
                outcome = await self.wait_done()
                await self.until_devices_told()
                return outcome
            finally:
                await self.stop(grace)

        return asyncio.run(whole_run())

    def __enter__(self):
        raise TypeError(
            "Coordinator is an async context manager: use `async with Coordinator(config) as c:`, or "
            "the blocking `Coordinator(config).run()` from code without an event loop"
        )

    def __exit__(self, *exc) -> None:  # pragma: no cover - __enter__ always raises
        pass

    async def stop(self, grace: float | None = 5.0) -> None:
        """Stop serving (letting calls in flight finish within `grace` s) and stop the engine; idempotent."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self.engine is not None:
            self.engine.release_polls()  # held long-polls would otherwise keep stop() waiting for `grace`
        if self.web is not None:
            await self.web.stop()
            self.web = None
        if self._server is not None:
            await self._server.stop(grace)
        if self.servicer is not None:
            self.servicer.resumable.close()
        if self._engine_task is not None:
            self._engine_task.cancel()
            await asyncio.wait({self._engine_task})  # (a cancellation of stop() itself still propagates)
            self._engine_task = None
        if self.engine is not None:
            self.engine.close()
        if self._store is not None:
            self._store.close()
            self._store = None
        self._server = None
        if self.monitoring is not None:
            self.monitoring.stop()
        self._lock.release()
        log.info("coordinator stopped")

    @property
    def state(self) -> RoundState | None:
        return self.engine.state if self.engine else None

    async def __aenter__(self) -> Coordinator:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()
