"""Secure-aggregation protocol core: client and server CPU time, no gRPC, no training.

For cohorts of 10/50/100 clients and vectors of 5 k/100 k values it runs whole rounds of the
SecAgg state machines in one process (edge_client.secagg_client, coordinator.secagg_server)
with 10 % of the cohort dropping after sharing keys (so the server also removes pairwise masks
of dropped clients), classic SecAgg (K = n - 1) and SecAgg+ (K = 16 where n > 17). It reports:

- client `share` (Shamir-share two 16-byte seeds among K neighbours, seal K bundles) and `mask`
  (open K bundles, encode, K X25519 agreements + K + 1 PRG expansions of P + 1 uint64), per client;
- server `fold` (add one masked vector mod 2^b) per client and `unmask` (finish(): Shamir
  reconstructions + PRG expansions for every survivor's self mask and every dropped client's
  pairwise masks), plus the number of reconstructions and expansions it needed, and the median
  cost of one of each over 5 calls (so the breakdown is visible);
- the upload size: 8 (P + 1) bytes as uint64, and ceil(b (P + 1) / 8) if packed to b bits.

    python benchmarks/bench_secagg_core.py            # full grid, a few minutes on 2 cores
    python benchmarks/bench_secagg_core.py --quick    # 10 clients x 5 k only
    python benchmarks/bench_secagg_core.py --scheme 'chacha20-gf2^128'   # the legacy scheme (default: the newest)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import numpy as np

from fedort.coordinator.privacy.secagg.server import SecAggServer
from fedort.edge_client.secagg.client import SecAggClient
from fedort.common.secagg import FixedPoint, SecAggParams, default_threshold, effective_degree
from fedort.common.secagg.prg import expand
from fedort.common.secagg.scheme import SUPPORTED, combine_secrets, split_secret


def _params(n: int, length: int, degree: int, scheme: str) -> SecAggParams:
    ids = tuple(f"c{i:03d}" for i in range(n))
    deg = effective_degree(n, degree)
    return SecAggParams(1, ids, default_threshold(deg), degree, os.urandom(16),
                        FixedPoint.for_cohort(n, clip=1.0, scale=2.0**16), length, scheme)


def _median_time(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def one_round(n: int, length: int, degree: int, drop: float, scheme: str = SUPPORTED[0]) -> dict:
    params = _params(n, length, degree, scheme)
    rng = np.random.default_rng(0)
    server = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in params.cohort}
    for c in clients.values():
        server.receive_keys(c.advertise())
    server.close_advertise()
    share_t = []
    for c in params.cohort:
        roster = server.roster_for(c)
        t0 = time.perf_counter()
        msg = clients[c].share_keys(roster)
        share_t.append(time.perf_counter() - t0)
        server.receive_shares(msg)
    server.close_share_keys()
    dropped = set(params.cohort[:: max(1, round(1 / drop))][: int(n * drop)]) if drop else set()
    mask_t, fold_t = [], []
    for c in params.cohort:
        if c in dropped:
            continue
        update = rng.normal(0.0, 0.1, length)
        delivery = server.delivery_for(c)
        t0 = time.perf_counter()
        masked = clients[c].masked_input(delivery, update)
        t1 = time.perf_counter()
        server.receive_masked_input(c, masked)
        fold_t.append(time.perf_counter() - t1)
        mask_t.append(t1 - t0)
    request = server.close_masked_input()
    for c in request.survivors:
        server.receive_unmask(clients[c].unmask(request))
    t0 = time.perf_counter()
    server.finish()
    unmask = time.perf_counter() - t0
    survivors = set(request.survivors)
    pair_expansions = sum(len(set(params.neighbours[v]) & survivors) for v in request.dropped)
    combines = len(request.survivors) + sum(1 for v in request.dropped if set(params.neighbours[v]) & survivors)
    deg = effective_degree(n, degree)
    shares = split_secret(scheme, os.urandom(16), params.threshold, deg)
    one_combine = _median_time(lambda: combine_secrets(scheme, [shares], params.threshold))
    one_expand = _median_time(lambda: expand(os.urandom(32), length + 1, params.fixed_point.bits, scheme))
    bits = params.fixed_point.bits
    return {
        "n": n, "P": length, "K": deg, "T": params.threshold, "bits": bits, "dropped": len(request.dropped),
        "client_share_s": statistics.median(share_t), "client_mask_s": statistics.median(mask_t),
        "server_fold_s": statistics.median(fold_t), "server_unmask_s": unmask,
        "reconstructions": combines, "expansions": len(survivors) + pair_expansions,
        "one_combine_s": one_combine, "one_expand_s": one_expand,
        "upload_bytes_u64": 8 * (length + 1), "upload_bytes_packed": math.ceil(bits * (length + 1) / 8),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--scheme", default=SUPPORTED[0], choices=SUPPORTED, help="mask PRG + Shamir field")
    args = ap.parse_args()
    grid = [(10, 5_000)] if args.quick else [(n, p) for n in (10, 50, 100) for p in (5_000, 100_000)]
    rows = []
    for n, p in grid:
        for degree in sorted({n - 1, min(n - 1, 16)}, reverse=True):
            row = one_round(n, p, degree, drop=0.1, scheme=args.scheme)
            rows.append(row)
            print(f"n={n:3d} P={p:6d} K={row['K']:2d} T={row['T']:2d} b={row['bits']} drop={row['dropped']:2d} | "
                  f"client share {row['client_share_s'] * 1e3:7.1f} ms  mask {row['client_mask_s'] * 1e3:7.1f} ms | "
                  f"server fold {row['server_fold_s'] * 1e3:6.2f} ms/client  unmask {row['server_unmask_s']:6.2f} s "
                  f"({row['reconstructions']} Shamir x {row['one_combine_s'] * 1e3:.2f} ms, "
                  f"{row['expansions']} PRG x {row['one_expand_s'] * 1e3:.2f} ms) | "
                  f"upload {row['upload_bytes_u64'] / 1e3:.0f} kB (packed {row['upload_bytes_packed'] / 1e3:.0f} kB)",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
