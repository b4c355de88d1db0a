"""Run one federated simulation end to end on the real components.

A real `Coordinator` serves on loopback (in a thread of this process, with its state directory
inside the run folder) and real `EdgeClient`s train in worker processes (local or Ray), talking
gRPC exactly as deployed devices do. The run folder ends up with the report (metrics.csv,
metrics.json, metrics.png), the final inference model and the coordinator's full state.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedort.common.errors import ConfigError, FedortError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.coordinator.aggregation.server_optimizers import canonical_spec
from fedort.coordinator.state.layout import StateLayout
from fedort.ort.artifacts import Manifest, verify_artifacts
from fedort.simulations.artifact_cache import cached_builtin_artifacts
from fedort.simulations.attacks import choose_attackers
from fedort.simulations.config import SimulationConfig
from fedort.simulations.coordinator_settings import coordinator_config
from fedort.simulations.data.datasets import TEST_FILE, save_npz
from fedort.simulations.device_speed import parse_device_speed
from fedort.simulations.local_coordinator import LocalCoordinator
from fedort.simulations.population import (
    Population,
    choose_stragglers,
    digits_population,
    folder_population,
    synthetic_population,
)
from fedort.simulations.progress import RoundProgress
from fedort.simulations.report import RoundRecord, blank_figure, plot, summary_table, write_metrics
from fedort.simulations.workers.backends import Backend, prepared_backend
from fedort.simulations.workers.worker import WorkerPlan, WorkerStats

log = logging.getLogger("fedort.sim")


@dataclass(frozen=True)
class SimulationResult:
    out: Path
    records: list[RoundRecord]
    final: dict[str, Any]
    model: Path
    summary: str


def _prepare_artifacts(cfg: SimulationConfig, out: Path) -> tuple[Path, Manifest]:
    if cfg.artifacts is not None:
        return cfg.artifacts, verify_artifacts(cfg.artifacts)
    folder = out / "artifacts"  # a built-in model: copied from the machine's verified cache, or built once
    return folder, cached_builtin_artifacts(
        present(cfg.model, "model (a built-in one, without artifacts)"), cfg.seed, cfg.optimizer, folder
    )


def _population(cfg: SimulationConfig, data_dir: Path) -> Population:
    if cfg.data is not None:
        pop = folder_population(cfg.data)
        if len(pop.clients) != cfg.clients:
            log.info("using the %d clients found in %s (not --clients %d)", len(pop.clients), cfg.data, cfg.clients)
        return pop
    if cfg.is_synthetic:
        return synthetic_population(cfg.dataset, cfg.clients, cfg.seed, save_dir=data_dir)
    return digits_population(
        cfg.clients, cfg.partition, cfg.seed, cfg.test_fraction, save_dir=data_dir, min_size=cfg.min_partition_size
    )


def _codec_used(configured: str, records: list[RoundRecord]) -> str:
    """The codec the summary names: the configured one, or the secure-aggregation wire codecs the
    rounds' updates actually used (masked words, whatever the configured codec)."""
    secagg = sorted({c for r in records for c in r.codec.split("+") if c.startswith("secagg")})
    return "+".join(secagg) if secagg else configured


def device_speeds(cfg: SimulationConfig, client_ids: list[str]) -> tuple[tuple[str, float], ...]:
    """(client, compute-time factor) of every client when speeds are simulated (empty for `uniform`)."""
    if not cfg.virtual_clock:
        return ()
    factors = parse_device_speed(cfg.device_speed).factors(len(client_ids), cfg.seed)
    log.info(
        "device speeds %s on a virtual clock (%g simulated s per local step): factors %.2f..%.2f",
        cfg.device_speed,
        cfg.step_seconds,
        factors.min(),
        factors.max(),
    )
    return tuple(zip(client_ids, (float(f) for f in factors)))


def run_simulation(cfg: SimulationConfig, backend: Backend | None = None) -> SimulationResult:
    """Run `cfg` and write its report; returns the records and where everything is.

    `backend`: one from `prepared_backend(cfg)` made earlier (its workers already starting up);
    by default made here. Either way it is stopped when the run ends."""
    started = time.monotonic()
    if backend is None:  # local processes start importing while artifacts and data are made
        backend = prepared_backend(cfg)
    out = Path(cfg.out)
    before = set(out.iterdir()) if out.is_dir() else None
    try:
        if (out / "state").exists():
            raise ConfigError(f"{out} already holds a run; choose another --out (or delete it)")
        out.mkdir(parents=True, exist_ok=True)
        return _run(cfg, out, backend, started)
    except BaseException:
        if before is None or out / "state" not in before:  # never touch a folder that held a run before
            backend.stop()  # its workers write into the folder
            _remove_run_folder(out, before)  # a failed run leaves nothing that would refuse its rerun
        raise
    finally:
        backend.stop()


def _remove_run_folder(out: Path, before: set[Path] | None) -> None:
    """Delete what this run created in `out` (all of it if the run made the folder)."""
    if before is None:
        shutil.rmtree(out, ignore_errors=True)
        return
    for path in set(out.iterdir()) - before if out.is_dir() else ():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _run(cfg: SimulationConfig, out: Path, backend, started: float) -> SimulationResult:
    artifacts, manifest = _prepare_artifacts(cfg, out)
    backend.preload(
        artifacts, out / "cache" / "sessions"
    )  # workers open the session while data and coordinator are made
    (out / "data").mkdir(exist_ok=True)
    population = _population(cfg, out / "data")
    own_test = None if cfg.data is None else Path(cfg.data) / TEST_FILE
    # your own test file is evaluated where it is, so a problem with it names your file, not a copy
    test_path = (
        own_test if own_test is not None and own_test.is_file() else save_npz(out / "data" / TEST_FILE, population.test)
    )
    n_clients = len(population.clients)
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True))
    _place_state(cfg, out)
    ccfg = coordinator_config(cfg, artifacts, out / "state", test_path, n_clients)
    log.info(
        "simulation %s: %d clients, %d per round, %d rounds, %s, %s backend",
        cfg.name,
        n_clients,
        min(cfg.per_round, n_clients),
        cfg.rounds,
        _data_name(cfg),
        cfg.backend,
    )

    server = LocalCoordinator(ccfg, local_vectors=cfg.local_vectors)
    server.start()
    address = server.address
    workers = max(1, min(cfg.worker_count, n_clients))
    attackers = choose_attackers([c.client_id for c in population.clients], cfg.byzantine_fraction, cfg.seed)
    if attackers:
        log.info("byzantine clients (%s): %s", cfg.attack, sorted(attackers))
    stragglers = choose_stragglers([c.client_id for c in population.clients], cfg.straggler_fraction, cfg.seed)
    if stragglers:
        log.info("stragglers (at most %d local steps): %s", cfg.straggler_steps, sorted(stragglers))
    speeds = device_speeds(cfg, [c.client_id for c in population.clients])
    plans = [
        WorkerPlan(
            address,
            out / "cache" / f"worker-{i}",
            population.source,
            share,
            attack=cfg.attack if attackers else "",
            attackers=attackers,
            stragglers=stragglers,
            straggler_steps=cfg.straggler_steps,
            codec=cfg.codec,
            topk_warmup=cfg.topk_warmup,
            speeds=speeds,
            step_seconds=cfg.step_seconds,
        )
        for i, share in enumerate(population.split(workers))
    ]
    progress = RoundProgress(StateLayout(out / "state"), cfg.rounds, enabled=cfg.progress)
    stats: list[WorkerStats] | None = None
    figure = _BlankFigure()
    try:
        backend.start(plans)
        # the plot's imports and its empty figure while the rounds run: the main thread only
        # watches progress
        figure.start()
        while True:
            progress.update()
            stats = backend.results()
            if server.done or stats is not None:
                break
            server.wait(timeout=0.1)  # wakes as the run ends, not up to 0.1 s later
        if server.error is not None:
            raise server.error
        if stats is None:  # the coordinator finished first; workers exit on their next poll
            deadline = time.monotonic() + 60
            while stats is None and time.monotonic() < deadline:
                stats = backend.results()
                time.sleep(0.01)
        progress.update()
    finally:
        progress.close()
        backend.stop()
        server.stop()
    outcome = server.outcome
    if outcome is not None and outcome.state is RoundState.FAILED:
        raise FedortError(f"the simulated run failed: {getattr(outcome, 'message', outcome)}")
    return _report(
        cfg,
        out,
        manifest,
        stats or [],
        time.monotonic() - started,
        n_clients,
        figure.take(),
        ended=getattr(outcome, "message", None),
    )


class _BlankFigure(threading.Thread):
    """Imports matplotlib and makes the report's empty figure (`report.blank_figure`) in the background."""

    def __init__(self) -> None:
        super().__init__(name="fedort-plot-figure", daemon=True)
        self._figure = None

    def run(self) -> None:
        try:
            self._figure = blank_figure()
        except Exception:  # noqa: BLE001 - no matplotlib, or it failed: plot() makes its own and says why
            pass

    def take(self):
        """The figure once made (None if it could not be); each figure is drawn on once."""
        if self.ident is not None:
            self.join()
        figure, self._figure = self._figure, None
        return figure


def _place_state(cfg: SimulationConfig, out: Path) -> None:
    """With `state_dir` set, keep the coordinator state there and link OUT/state to it.

    Meant for tmpfs (/dev/shm): fsyncs become free, but the state, and so a resume after a crash,
    lives only until the machine restarts; OUT keeps the report and model either way.
    """
    if cfg.state_dir is None:
        return
    target = Path(cfg.state_dir).resolve()
    if (target / "state.db").exists():
        raise ConfigError(f"state_dir {target} already holds a coordinator state; choose an empty one")
    target.mkdir(parents=True, exist_ok=True)
    (out / "state").symlink_to(target, target_is_directory=True)


def _data_name(cfg: SimulationConfig) -> str:
    if cfg.data is not None:
        return str(cfg.data)
    return cfg.dataset if cfg.is_synthetic else cfg.partition


def _report(
    cfg: SimulationConfig,
    out: Path,
    manifest: Manifest,
    stats: list[WorkerStats],
    seconds: float,
    n_clients: int,
    figure=None,
    ended: str | None = None,
) -> SimulationResult:
    from fedort.coordinator.state.store import StateStore

    layout = StateLayout(out / "state")
    store = StateStore(layout.root, readonly=True)
    try:
        rounds = {r.round: r for r in store.rounds() if r.vector_sha256}
    finally:
        store.close()
    records = []
    for n in sorted(rounds):
        row = rounds[n]
        record = json.loads(layout.model_record(n).read_text())
        ev = record.get("server_eval") or {}
        records.append(
            RoundRecord(
                round=n,
                accuracy=ev.get("accuracy"),
                loss=ev.get("loss"),
                clients=row.clients,
                examples=row.examples,
                # the coordinator's count of the payload bytes it received (secure aggregation's packed words,
                # not the float32 vector the workers trained); the workers' count where it has none (a restart)
                bytes_up=record.get("bytes_up")
                if record.get("bytes_up") is not None
                else sum(s.bytes_up.get(n, 0) for s in stats),
                bytes_down=sum(s.bytes_down.get(n, 0) for s in stats),
                seconds=((row.closed_ms or row.opened_ms) - row.opened_ms) / 1000,
                metrics={k: float(v) for k, v in (row.metrics or {}).items() if isinstance(v, (int, float))},
                codec="+".join(record.get("codecs") or []),
            )
        )
        sim = [s.sim_seconds[n] for s in stats if n in s.sim_seconds]
        if sim:
            records[-1].metrics["sim_seconds"] = round(max(sim), 6)  # sums of step times: no float dust
    if not records:
        raise FedortError("the simulation committed no round; see the log above")
    last = records[-1]
    model = out / "model.onnx"
    shutil.copyfile(layout.model_file(last.round), model)
    data = json.loads(layout.model_record(last.round).read_text()).get("model_data")
    if data:  # ONNX external data (coordinator.export_external): the file model.onnx names goes beside it
        shutil.copyfile(layout.model_dir(last.round) / data, out / data)
    # with --data, the clients and their split are the folder's, not the --clients/--partition defaults
    partition = _data_name(cfg) if cfg.data is None else f"as given in {cfg.data}"
    final = {
        "name": cfg.name,
        "clients": n_clients,
        "partition": partition,
        "model_id": manifest.model_id,
        "parameters": manifest.parameter_count,
        "test_accuracy": last.accuracy,
        "test_loss": last.loss,
        "wall_seconds": round(seconds, 2),
        "model": str(model),
        "target_accuracy": cfg.target_accuracy,
        "fits": sum(s.fits for s in stats),
        "codec": _codec_used(cfg.codec, records),
        "strategy": cfg.strategy,
        "server_optimizer": canonical_spec(cfg.server_optimizer),
    }
    if "epsilon" in last.metrics:  # differential privacy: the budget spent, and whether it ended the run
        final.update(epsilon=round(last.metrics["epsilon"], 4), dp_delta=cfg.privacy.dp_delta, ended=ended)
    if cfg.fedbuff.mode == "async":
        final.update(
            mode="async",
            buffer_size=cfg.fedbuff.buffer_size,
            max_staleness=cfg.fedbuff.max_staleness,
            staleness_weight=cfg.fedbuff.staleness_weight,
        )
    if cfg.virtual_clock:
        sim_seconds = last.metrics.get("sim_seconds")
        final.update(device_speed=cfg.device_speed, sim_seconds=None if sim_seconds is None else round(sim_seconds, 3))
        if cfg.target_accuracy is not None:
            hit = next((r for r in records if r.accuracy is not None and r.accuracy >= cfg.target_accuracy), None)
            final["sim_seconds_to_target"] = hit.metrics.get("sim_seconds") if hit else None
    write_metrics(records, out, final)
    plot(
        records,
        out / "metrics.png",
        f"{cfg.name}: {n_clients} clients, {partition}",
        target=cfg.target_accuracy,
        figure=figure,
    )
    # the table already shows accuracy, loss, updates and the target row; the CLI prints the model path
    shown = {
        k: v
        for k, v in final.items()
        if v is not None and k not in ("test_accuracy", "test_loss", "target_accuracy", "fits", "model")
    }
    text = summary_table(records, shown, target=cfg.target_accuracy)
    return SimulationResult(out, records, final, model, text)
