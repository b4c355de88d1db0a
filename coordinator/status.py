"""What a coordinator's run looks like: rounds, clients and the latest model, live or from disk.

The same `protos.messages.Status` answers the Status RPC (from the running engine) and
`fedort coordinator status` (read-only from SQLite, also while the server runs: WAL readers do
not block the writer).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from fedort.common.round_state import RoundRowState, RoundState, RunState
from fedort.coordinator.state.integrity import export_problem
from fedort.coordinator.state.layout import StateLayout
from fedort.coordinator.state.schema import TransitionRow
from fedort.coordinator.state.store import StateStore
from fedort.protos.messages import RoundSummary, Status


def latest_model(state_dir: Path) -> str:
    """Path of the newest exported model.onnx ('' if none yet, or if it does not match its model.json)."""
    return latest_export(state_dir)[0]


def latest_export(state_dir: Path) -> tuple[str, str]:
    """(path of the newest intact model.onnx or '', why the newest export is not intact or '')."""
    layout = StateLayout(state_dir)
    try:
        model = layout.models / json.loads(layout.latest_json.read_text())["model"]
    except FileNotFoundError:
        return "", ""
    except (OSError, ValueError, KeyError, TypeError) as e:
        return "", f"{layout.latest_json} is unreadable ({type(e).__name__})"
    problem = export_problem(model.parent)
    return ("", problem) if problem else (os.fspath(model), "")


def snapshot(
    store: StateStore,
    *,
    current_round: int | None = None,
    total_rounds: int | None = None,
    state: RoundState | None = None,
    registered: int | None = None,
    active: int | None = None,
) -> Status:
    """A snapshot from the database, with live values (from the engine) where given."""
    rows = store.rounds()
    clients = store.clients()
    config = json.loads(store.get_meta("config", "{}") or "{}")
    done = [r.round for r in rows if RoundRowState(r.state).committed]
    latest = latest_export(store.dir)
    run_state = RunState(store.get_meta("run_state", RunState.RUNNING.value))
    if state is None:
        open_rows = [r for r in rows if RoundRowState(r.state) is RoundRowState.OPEN]
        state = (
            RoundState[run_state.name]
            if run_state is not RunState.RUNNING
            else RoundState.TRAINING
            if open_rows
            else RoundState.WAITING_FOR_CLIENTS
        )
    return Status(
        model_id=store.get_meta("model_id", "") or "",
        current_round=current_round if current_round is not None else (max(done) + 1 if done else 1),
        total_rounds=total_rounds if total_rounds is not None else int(config.get("rounds", 0)),
        state=state,
        registered_clients=registered if registered is not None else len(clients),
        # nobody trains once the run is over, however recently a client was seen
        active_clients=0 if state.final else active if active is not None else sum(c.active for c in clients),
        rounds=tuple(
            RoundSummary(
                r.round, RoundRowState(r.state), r.clients, r.examples, r.metrics, r.attempt, r.model_path, r.message
            )
            for r in rows
        ),
        latest_model=latest[0],
        message=store.get_meta("run_message", "") or "",
        latest_problem=latest[1],
        storage_free_bytes=free_bytes(store.dir),
    )


def free_bytes(state_dir: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the state dir's filesystem (None if it cannot be asked)."""
    try:
        st = os.statvfs(state_dir)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def storage_line(s: Status) -> str:
    """The status line about the state dir's free space; 'FULL' says what the coordinator does meanwhile."""
    free = s.storage_free_bytes
    if free is None:
        return "storage    (free space unknown)"
    if s.storage_full:
        return (
            f"storage    FULL: {free} bytes free on the state dir's filesystem; the coordinator waits for space "
            "and answers clients UNAVAILABLE 'coordinator storage full' until some is freed"
        )
    return f"storage    {free / (1 << 30):.1f} GiB free"


def offline_status(state_dir: str | os.PathLike) -> Status:
    """The status of a state dir, each committed round with its server-side evaluation (`with_server_eval`)."""
    store = StateStore(state_dir, readonly=True)
    try:
        return with_server_eval(snapshot(store), Path(state_dir))
    finally:
        store.close()


#: metric names under which a round's server-side evaluation (model.json's `server_eval`) is shown
SERVER_EVAL = {"accuracy": "server_accuracy", "loss": "server_loss"}


def with_server_eval(s: Status, state_dir: Path) -> Status:
    """`s` with each round's server-side evaluation (`--eval-data`, recorded in its model.json) among its
    metrics as `server_accuracy` / `server_loss`: the numbers an operator looks for, beside the clients'."""
    layout = StateLayout(state_dir)
    rounds = []
    for r in s.rounds:
        try:
            ev = json.loads(layout.model_record(r.round).read_text()).get("server_eval") or {}
        except (OSError, ValueError, AttributeError):  # not exported (yet), or unreadable: nothing to add
            ev = {}
        extra = {name: float(ev[key]) for key, name in SERVER_EVAL.items() if isinstance(ev.get(key), (int, float))}
        rounds.append(dataclasses.replace(r, metrics={**r.metrics, **extra}) if extra else r)
    return dataclasses.replace(s, rounds=tuple(rounds))


def evaluation_line(s: Status) -> str | None:
    """'evaluated  round N: accuracy A, loss L (server)' for the newest round evaluated on the server."""
    evaluated = [r for r in s.rounds if "server_accuracy" in r.metrics or "server_loss" in r.metrics]
    if not evaluated:
        return None
    r = evaluated[-1]
    parts = []
    if "server_accuracy" in r.metrics:
        parts.append(f"accuracy {100 * r.metrics['server_accuracy']:.2f} %")
    if "server_loss" in r.metrics:
        parts.append(f"loss {r.metrics['server_loss']:.4g}")
    return f"evaluated  round {r.round}: {', '.join(parts)} (server-side, --eval-data)"


def format_status(s: Status) -> str:
    """Human-readable status, as `fedort coordinator status` prints it."""
    lines = [
        f"model      {s.model_id}",
        f"state      {s.state.name}" + (f": {s.message}" if s.message else ""),
        f"round      {min(s.current_round, s.total_rounds) if s.total_rounds else s.current_round} of {s.total_rounds}"
        + (" (all committed)" if s.total_rounds and s.current_round > s.total_rounds else ""),
        f"clients    {s.registered_clients} registered, {s.active_clients} active",
        f"latest     {s.latest_model or ('(none intact: ' + s.latest_problem + ')' if s.latest_problem else '(no model exported yet)')}",
        storage_line(s),
        *filter(None, [evaluation_line(s)]),
        "",
        f"{'round':>5}  {'state':<10} {'try':>3} {'clients':>7} {'examples':>9}  metrics",
    ]
    for r in s.rounds:
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(r.metrics.items()))
        lines.append(
            f"{r.round:>5}  {r.state.value:<10} {r.attempt:>3} {r.clients:>7} {r.examples:>9}  {metrics}"
            + (f"  [{r.message}]" if r.message else "")
        )
    if not s.rounds:
        lines.append("  (no round opened yet)")
    return "\n".join(lines + async_summary(s))


def async_summary(s: Status) -> list[str]:
    """For an async (FedBuff) run, whose rows are versions: the staleness histogram and throughput over all of them."""
    versions = [r for r in s.rounds if "staleness_mean" in r.metrics]
    if not versions:
        return []
    hist: dict[int, int] = {}
    for r in versions:
        for k, v in r.metrics.items():
            if k.startswith("staleness_") and k[10:].isdigit():
                hist[int(k[10:])] = hist.get(int(k[10:]), 0) + int(v)
    rates = [r.metrics["updates_per_s"] for r in versions if "updates_per_s" in r.metrics]
    return [
        "",
        f"async      {len(versions)} versions committed from {sum(r.clients for r in versions)} updates; "
        f"throughput {sum(rates) / max(1, len(rates)):.3g} updates/s (mean over versions)",
        "staleness  " + ", ".join(f"{k}: {hist[k]}" for k in sorted(hist)) + "  (versions behind: updates)",
    ]


def round_timeline(state_dir: str | os.PathLike) -> list[TransitionRow]:
    """The round engine's transitions recorded in a state dir, oldest first, each with its unix time.

    Transitions are written with the engine's next durable step (no fsync of their own), so the
    last one or two of a live run appear once it moves on or stops.
    """
    store = StateStore(state_dir, readonly=True)
    try:
        return store.transitions()
    finally:
        store.close()
