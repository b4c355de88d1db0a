"""Flower's half of the no-work round benchmarks: a client that trains nothing and a timed FedAvg.

bench_round_overhead.py and bench_secagg_vs_flower.py both time Flower rounds in which every client
returns the vector it received (`timed_strategy` also times flower_ort.py's strategies). Their trial
scripts run under the Flower venv's python (flower_venv.py) and import this file from benchmarks/
(which `flower_venv.run_trial` puts on PYTHONPATH, so Ray's workers find it too). flwr and numpy are
imported only inside the functions, so the fedort side can import this module without them.
"""

from __future__ import annotations

import sys
import time


def echo_client_app(mods: tuple = ()):
    """A `ClientApp` whose `NumPyClient.fit` returns the received parameters unchanged (1 example);
    `mods` are Flower client mods, e.g. `(secaggplus_mod,)`."""
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context

    class Echo(NumPyClient):
        """Trains nothing: returns the received parameters unchanged."""

        def fit(self, parameters, config):
            return parameters, 1, {}

    def client_fn(context: Context):
        return Echo().to_client()

    return ClientApp(client_fn=client_fn, mods=list(mods))


def timed_strategy(base, starts: list[float], ends: list[float] | None = None, failed: list[int] | None = None,
                   **options):
    """Flower strategy class `base` (FedAvg, FedAdam, FedProx, ...) built with `options`, which appends
    `time.time()` to `starts` when a round's fit is configured and to `ends` (if given) once it is
    aggregated, and each round's number of failed fits to `failed` (if given); failures go to stderr."""

    class Timed(base):
        def configure_fit(self, server_round, parameters, client_manager):
            starts.append(time.time())
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            if ends is not None:
                ends.append(time.time())
            if failed is not None:
                failed.append(len(failures))
            if failures:
                print(f"round {server_round}: {len(failures)} failures", file=sys.stderr)
            return out

    Timed.__name__ = f"Timed{base.__name__}"
    return Timed(**options)


def timed_fedavg(params: int, clients: int, starts: list[float], ends: list[float] | None = None):
    """Legacy `FedAvg` over the whole cohort of `clients` (no evaluation, `params` float32 zeros to
    start), timed as `timed_strategy` says."""
    import numpy as np
    from flwr.common import ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    return timed_strategy(FedAvg, starts, ends, fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients,
                          min_evaluate_clients=0, min_available_clients=clients,
                          initial_parameters=ndarrays_to_parameters([np.zeros(params, np.float32)]))
