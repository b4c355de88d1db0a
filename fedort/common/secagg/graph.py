"""The SecAgg+ communication graph: who masks with whom and who holds whose shares.

Bell et al. (CCS 2020) replace the complete graph of SecAgg with a sparse random one. Here it
is a Harary graph on a pseudo-random ring: the cohort is ordered by SHA-256(seed || id) (the
seed is public, chosen by the coordinator per round) and each client is joined to the
ceil(K/2) clients on either side, so every degree is 2*ceil(K/2) (K rounded up to even). When
that reaches n - 1 the graph is complete: classic SecAgg. Both sides compute it from the seed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from fedort.common.errors import ConfigError


def effective_degree(n: int, degree: int) -> int:
    """The degree every client actually gets for cohort size `n` and requested `degree`."""
    if n < 2:
        return 0
    even = degree + (degree % 2)
    return n - 1 if even >= n - 1 else even


def neighbour_graph(ids: Sequence[str], degree: int, seed: bytes) -> Mapping[str, tuple[str, ...]]:
    """id -> sorted neighbour ids (never itself) of the Harary graph described above."""
    if degree < 1:
        raise ConfigError(f"secagg neighbours must be >= 1, got {degree}")
    if len(set(ids)) != len(ids):
        raise ConfigError("secagg cohort ids must be distinct")
    n = len(ids)
    ring = sorted(ids, key=lambda i: hashlib.sha256(seed + i.encode()).digest())
    if effective_degree(n, degree) >= n - 1:
        return {i: tuple(sorted(j for j in ids if j != i)) for i in ids}
    half = (degree + 1) // 2
    graph: dict[str, tuple[str, ...]] = {}
    for pos, node in enumerate(ring):
        near = {ring[(pos + d) % n] for d in range(1, half + 1)} | {ring[(pos - d) % n] for d in range(1, half + 1)}
        graph[node] = tuple(sorted(near))
    return graph
