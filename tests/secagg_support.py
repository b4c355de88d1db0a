"""Drives the secure-aggregation state machines in-process for tests and benchmarks (no gRPC)."""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np

from fedort.coordinator.privacy.secagg.server import SecAggResult, SecAggServer
from fedort.edge_client.secagg.client import SecAggClient
from fedort.common.secagg import FixedPoint, SecAggParams, default_threshold, effective_degree
from fedort.common.secagg.scheme import LEGACY


def make_params(n: int, length: int, degree: int | None = None, threshold: int | None = None,
                clip: float = 1.0, scale: float = 2.0**16, round_id: int = 1, scheme: str = LEGACY) -> SecAggParams:
    ids = tuple(f"c{i:03d}" for i in range(n))
    degree = n - 1 if degree is None else degree
    deg = effective_degree(n, degree)
    return SecAggParams(round_id, ids, threshold or default_threshold(deg), degree, os.urandom(16),
                        FixedPoint.for_cohort(n, clip, scale), length, scheme)


def run_round(params: SecAggParams, updates: dict[str, np.ndarray], *,
              drop_before_keys: Iterable[str] = (), drop_before_shares: Iterable[str] = (),
              drop_before_upload: Iterable[str] = (), drop_before_unmask: Iterable[str] = (),
              server: SecAggServer | None = None, reload: bool = False, precompute: Iterable[str] = ()) -> SecAggResult:
    """One full round; each `drop_*` set vanishes just before that phase. `reload`: the server is
    dumped and loaded again (a coordinator restart) after every message and every phase close.
    The clients in `precompute` expand their masks after sharing keys, before the phase closes."""
    gone: set[str] = set(drop_before_keys)
    holder = [server or SecAggServer(params)]

    class _Restarting:
        def __getattr__(self, name):
            attr = getattr(holder[0], name)
            if not callable(attr) or not reload:
                return attr

            def call(*a, **kw):  # look the method up now: the arguments may have reloaded the server
                out = getattr(holder[0], name)(*a, **kw)
                holder[0] = SecAggServer.load(holder[0].dump())
                return out
            return call

    server = _Restarting()
    clients = {c: SecAggClient(c, params) for c in params.cohort if c not in gone}
    for c, client in clients.items():
        server.receive_keys(client.advertise())
    server.close_advertise()
    gone |= set(drop_before_shares)
    for c in server.state.u1:
        if c not in gone:
            server.receive_shares(clients[c].share_keys(server.roster_for(c)))
            if c in set(precompute):
                clients[c].precompute_masks()
    server.close_share_keys()
    gone |= set(drop_before_upload)
    for c in server.state.u2:
        if c not in gone:
            server.receive_masked_input(c, clients[c].masked_input(server.delivery_for(c), updates[c]))
    request = server.close_masked_input()
    gone |= set(drop_before_unmask)
    for c in request.survivors:
        if c not in gone:
            server.receive_unmask(clients[c].unmask(request))
    return holder[0].finish()


def through_share_keys(params: SecAggParams, missing: Iterable[str] = ()) -> tuple[SecAggServer, dict[str, SecAggClient]]:
    """A server and its clients after the share-keys phase closed; `missing` advertised keys but never shared."""
    server = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in params.cohort}
    for client in clients.values():
        server.receive_keys(client.advertise())
    server.close_advertise()
    for c in params.cohort:
        shares = clients[c].share_keys(server.roster_for(c))
        if c not in set(missing):
            server.receive_shares(shares)
    server.close_share_keys()
    return server, clients


def quantized_sum(params: SecAggParams, updates: dict[str, np.ndarray], ids: Sequence[str]) -> np.ndarray:
    """The exact integer sum (mod 2^b) of the encoded updates of `ids`."""
    total = np.zeros(params.length + 1, dtype=np.uint64)
    for c in ids:
        total += params.fixed_point.encode(updates[c])
    return total & params.fixed_point.modulus_mask
