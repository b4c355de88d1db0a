"""Combiner: the secure sum. Masked inputs are summed mod 2^b as they arrive; only the SUM is ever decoded.

    A = Σᵢ yᵢ mod 2^b,  yᵢ = encode(wᵢ·dᵢ, wᵢ) + pairwise masks + self mask     (uint64, P + 1, O(P))
    unmask(A) = Σᵢ encode(wᵢ·dᵢ) → (S = Σᵢ wᵢ·dᵢ, W = Σᵢ wᵢ)                 (after the SecAgg unmask phase)
    FedAvg:  c = g + S / W            DP (w = 1, clients added z·C/√n each):  c = g + S / n_exp

dᵢ is client i's delta from the round's global vector g, clipped and quantized on the device
(`protos.secagg.quantize`). The protocol state and the accumulator live in the round's
`secagg_round.SecAggRound` (bound here by the engine); this stage hands it each durable masked
input with the sender's id, and turns the unmasked sum into the combined vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedort.common.errors import ProtocolError, VectorError
from fedort.common.invariants import present
from fedort.common.secagg.pack import is_masked
from fedort.common.secagg.task import SECAGG_CODEC
from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.update import Update

if TYPE_CHECKING:
    from fedort.coordinator.privacy.dp_fedavg import DPClipState
    from fedort.coordinator.privacy.secagg.secure_round import SecAggRound


class SecureSum(Combiner):
    """Sum of masked inputs mod 2^b (in the round's SecAggRound), decoded once at round close."""

    name = "secure-sum"
    streaming = True
    folds_words = True  # masked uint64 words, summed mod 2^b by the round's SecAggRound

    def __init__(self, dp: DPClipState | None = None) -> None:
        self.dp = dp
        self.session: SecAggRound | None = None

    def bind(self, session: SecAggRound) -> None:
        self.session = session

    @property
    def _session(self) -> SecAggRound:
        return present(self.session, "the round's SecAggRound (bound when it is created)")

    def fold_update(self, update: Update, length: int) -> None:
        if not is_masked(update.codec):
            raise ProtocolError(
                f"secure aggregation folds only masked updates ({SECAGG_CODEC!r}, "
                f"'secagg-packed:b'), got {update.codec!r}"
            )
        self._session.receive_masked(update.client_id, update.encoded(), update.codec)  # VectorError: a bad spec

    def combine(self, spooled: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        result = self._session.result
        if result is None:
            raise VectorError("secure aggregation has not unmasked this round's sum")
        g = np.asarray(global_vector, dtype=np.float64)
        denominator = self._session.expected_clients if self.dp is not None else result.weight_sum
        if not denominator > 0:
            raise VectorError(f"secure aggregation decoded a total weight of {denominator}")
        return (g + result.weighted_sum / denominator).astype(np.float32)
