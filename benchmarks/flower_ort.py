"""Flower's half of the README-task benchmarks: fedort's ORT training as a Flower client, one timed strategy.

bench_vs_flower_task.py (FedAvg) and bench_vs_flower_fedopt.py (FedAdam, FedYogi, FedProx) run the
same Flower side; only `spec["strategy"]` (and its Flower options) changes. `trial(py, script, spec)`
runs TRIAL_SCRIPT with the Flower venv's python (flower_venv.run_trial: benchmarks/ on PYTHONPATH, so
Ray's actors import this module too); the script calls `run(spec)`:

- flwr 1.42 `run_simulation` (Ray backend, `cpus` per client), the strategy over all `clients` every
  round (fraction_fit 1, no client evaluation), server-side test accuracy after every round
  (`evaluate_fn` on data/test.npz), the initial vector the artifacts' checkpoint;
- a `NumPyClient` whose `fit` is fedort's ORT training itself: `TrainingSession.from_buffer` +
  `reset_optimizer_state`, `Trainer(max_epochs=epochs, batch_size=batch, shuffle=True, seed=...)` on a
  `TrainingModule`, `to_buffer` — the modules behind `edge_client.local_round.fit` (which cannot be
  imported there: it pulls in fedort's protobuf-7 wire types, and flwr pins protobuf<7). With FedProx's
  `proximal_mu` in the fit config the step is fedort's proximal SGD step around the round's global
  vector (`edge_client.fedprox.proximal_step`, as `local_round.fit` does). Client seeds are derived
  as fedort's simulation derives them; one ORT session per process (1 intra-op thread).

    spec = {"artifacts": DIR, "data": DIR (client-NNNN.npz, test.npz), "rounds", "clients", "cpus",
            "epochs", "batch", "seed", "lr", "strategy": one of STRATEGIES, "options": {Flower kwargs}}

flwr, numpy and fedort (installed in Flower's venv with --no-deps) are imported inside the functions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path

STRATEGIES = ("fedavg", "fedadam", "fedyogi", "fedprox")
TRIAL_SCRIPT = ("import json, sys, time\nt0 = time.time()\nimport flower_ort\n"
                "print('RESULT ' + json.dumps(flower_ort.run(json.loads(sys.argv[1]), t0)))\n")
_SESSIONS: dict = {}   # artifacts folder -> the process's TrainingSession (never pickled: see session)


def trial(py: Path, script: Path, spec: dict, timeout: float = 1800) -> dict:
    """One Flower run of `spec` in its own process (the script written to `script`); its RESULT with
    `wall_s` timed from launch to exit (imports, Ray start, rounds, shutdown)."""
    import flower_venv

    if spec["strategy"] not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {spec['strategy']!r}")
    t0 = time.time()
    result = flower_venv.run_trial(py, script, TRIAL_SCRIPT, [json.dumps(spec)], timeout)
    return {**result, "wall_s": time.time() - t0}


def session(artifacts: str):
    """One ORT session per process (as a fedort worker shares one among its clients), kept in this module,
    which Ray's actors import by name: a client function refers to it, never carries one."""
    if artifacts not in _SESSIONS:
        from fedort.ort.session import TrainingSession
        from fedort.ort.session_config import SessionConfig

        _SESSIONS[artifacts] = TrainingSession.from_artifacts(artifacts, config=SessionConfig(intra_op_threads=1))
    return _SESSIONS[artifacts]


def client_seed(seed: int, rnd: int, cid: int) -> int:
    digest = hashlib.sha256(f"{seed}:{rnd}:client-{cid:04d}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _client(spec: dict, context):
    """Flower's client_fn (bound to `spec` with functools.partial: pickled by reference plus the spec)."""
    import numpy as np
    from flwr.client import NumPyClient

    from fedort.common.client_data import ClientData
    from fedort.edge_client.training.fedprox import proximal_step
    from fedort.edge_client.training.module import TrainingModule
    from fedort.edge_client.training.trainer import Trainer

    cid = int(context.node_config["partition-id"])

    class OrtClient(NumPyClient):
        def __init__(self):
            self.data = ClientData.load(Path(spec["data"]) / f"client-{cid:04d}.npz")

        def fit(self, parameters, config):
            s = session(spec["artifacts"])
            rnd = int(config["server_round"])
            center = np.ascontiguousarray(parameters[0], dtype=np.float32)
            s.from_buffer(center)
            s.reset_optimizer_state()
            module = TrainingModule(s)
            module.lr = spec["lr"]
            trainer = Trainer(max_epochs=spec["epochs"], batch_size=spec["batch"], shuffle=True,
                              seed=client_seed(spec["seed"], rnd, cid), progress=False,
                              optimizer_step=proximal_step(s, center, float(config.get("proximal_mu", 0.0))))
            result = trainer.fit(module, self.data.arrays_for(s.manifest.inputs))
            return [np.array(s.to_buffer(), dtype=np.float32, copy=True)], int(result.num_examples), {}

    return OrtClient().to_client()


def run(spec: dict, t_start: float) -> dict:
    """Run the simulation `spec` describes (in the Flower venv); what TRIAL_SCRIPT prints as RESULT."""
    import flwr
    import numpy as np
    from flwr.client import ClientApp
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server import strategy as strategies
    from flwr.simulation import run_simulation

    from flower_echo import timed_strategy

    base = {"fedavg": strategies.FedAvg, "fedadam": strategies.FedAdam, "fedyogi": strategies.FedYogi,
            "fedprox": strategies.FedProx}[spec["strategy"]]
    rounds, clients = spec["rounds"], spec["clients"]
    test = np.load(Path(spec["data"]) / "test.npz")
    accuracy, starts, evals, failed = {}, [], [], []

    def evaluate_fn(server_round, parameters, config):
        s = session(spec["artifacts"])
        s.from_buffer(np.ascontiguousarray(parameters[0], dtype=np.float32))
        x, y = test["x"], test["labels"]
        loss_sum, correct = 0.0, 0
        for i in range(0, len(y), 512):
            out = s.eval_step(x[i:i + 512], y[i:i + 512])
            loss_sum += float(out[s.manifest.eval_outputs[0]]) * len(y[i:i + 512])
            correct += int((np.argmax(out["logits"], axis=1) == y[i:i + 512]).sum())
        if server_round > 0:
            accuracy[server_round] = correct / len(y)
            evals.append(time.time())
        return loss_sum / len(y), {"accuracy": correct / len(y)}

    def server_fn(context):
        initial = np.array(session(spec["artifacts"]).to_buffer(), dtype=np.float32, copy=True)
        strategy = timed_strategy(base, starts, failed=failed, fraction_fit=1.0, fraction_evaluate=0.0,
                                  min_fit_clients=clients, min_evaluate_clients=0, min_available_clients=clients,
                                  evaluate_fn=evaluate_fn, on_fit_config_fn=lambda r: {"server_round": r},
                                  initial_parameters=ndarrays_to_parameters([initial]), **spec.get("options", {}))
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    run_simulation(server_app=ServerApp(server_fn=server_fn),
                   client_app=ClientApp(client_fn=functools.partial(_client, spec)), num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": spec["cpus"], "num_gpus": 0.0}})
    return {"side": "flower", "wall_s": time.time() - t_start,
            "rounds_s": (evals[-1] - starts[0]) if evals and starts else None,
            "accuracy": [accuracy.get(r) for r in range(1, rounds + 1)], "client_failures": sum(failed),
            "strategy": spec["strategy"], "options": spec.get("options", {}), "flwr": flwr.__version__}
