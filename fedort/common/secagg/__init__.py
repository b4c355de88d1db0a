"""Secure aggregation (SecAgg+, Bell et al. CCS 2020; SecAgg, Bonawitz et al. CCS 2017): the
parts both sides need — fixed point in Z_{2^b}, the mask PRG, key agreement and share
encryption, Shamir sharing, the neighbour graph and the per-phase messages. The client state
machine lives in `fedort.edge_client.secagg.client`, the server's in `fedort.coordinator.privacy.secagg.server`.
"""

from fedort.common.secagg.errors import SecAggAborted, SecAggError
from fedort.common.secagg.graph import effective_degree, neighbour_graph
from fedort.common.secagg.messages import (
    AdvertiseKeys,
    Roster,
    SecAggParams,
    ShareDelivery,
    ShareKeys,
    UnmaskRequest,
    UnmaskResponse,
    default_threshold,
)
from fedort.common.secagg.quantize import FixedPoint, modulus_bits

__all__ = [
    "AdvertiseKeys",
    "FixedPoint",
    "Roster",
    "SecAggAborted",
    "SecAggError",
    "SecAggParams",
    "ShareDelivery",
    "ShareKeys",
    "UnmaskRequest",
    "UnmaskResponse",
    "default_threshold",
    "effective_degree",
    "modulus_bits",
    "neighbour_graph",
]
