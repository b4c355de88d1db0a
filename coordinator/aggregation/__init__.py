"""The aggregation pipeline: what happens to an update between "durable" and "the next global vector".

    durable update (client id, num_examples, codec, payload in memory or the spool file)
        │
        ▼  decode         decode.py; decode_codecs.py (raw, fp16, int8, topk…)  bytes -> float32 values v (+ g for deltas)
        ▼  transforms     transform.py; clipping.py (clip:NORM)               v -> T_k(…T_1(v; g)…)
        ▼  combiner       combiner.py; streaming: weighted_sum.py (FedAvg),  all updates -> c
        │                 spool: median.py, trimmed_mean.py, krum.py (spool.py reads the files)
        ▼  server update  server_update.py (identity: g' = c); FedAvgM/FedAdam/… (g, c) -> g'
        │                 from coordinator/aggregation/server_optimizers/stage.py (--server-optimizer)
        │
    the round's commit: g' written to vectors/round-{r+1}, optimizer state beside it, then the row

`aggregator.RoundAggregator` runs the chain for one round (`add(update)` per durable update,
`result()` at close); `strategies.Strategy` is the configured chain and `parse_strategy` builds it
from the `--strategy` spec. Each stage documents its math in its own module.

Plugging in: a codec is a `decode.Decoder` subclass registered with `register_decoder` (one file,
imported below); DP noise is a `transform.Transform`; a secure sum is a streaming
`combiner.Combiner`; FedAdam & co. are a `server_update.ServerUpdate` with `state`/`load_state`
(`server_optimizers.stage.ServerOptimizerStage`, attached by `configured_strategy`).
"""

from fedort.coordinator.aggregation import decode_codecs  # noqa: F401  (registers raw, fp16, bf16, int8, topk, zstd+)
from fedort.coordinator.aggregation.aggregator import RoundAggregator, RoundResult
from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.decode import Decoder, codecs, decoder_for, register_decoder
from fedort.coordinator.aggregation.server_update import ServerUpdate
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.strategies import (
    SPECS,
    ClippedFedAvg,
    FedAvg,
    Krum,
    Median,
    Strategy,
    TrimmedMean,
    parse_strategy,
)
from fedort.coordinator.aggregation.transform import Transform
from fedort.coordinator.aggregation.update import Update
from fedort.coordinator.aggregation.weighted_sum import WeightedSum
from fedort.coordinator.privacy.secagg import decode as decode_secagg  # noqa: F401  (registers `secagg-u64`, masked updates)

__all__ = [
    "SPECS",
    "ClippedFedAvg",
    "Combiner",
    "Decoder",
    "FedAvg",
    "Krum",
    "Median",
    "RoundAggregator",
    "RoundResult",
    "ServerUpdate",
    "SpooledUpdate",
    "Strategy",
    "Transform",
    "TrimmedMean",
    "Update",
    "WeightedSum",
    "codecs",
    "decoder_for",
    "parse_strategy",
    "register_decoder",
]
