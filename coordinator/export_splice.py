"""Per-round inference export without ORT: the last ORT export's bytes with the parameters replaced.

ORT's `export_model_for_inferencing` re-serializes the whole pruned graph every round (≈ 50 ms of
CPU for 5 M values, plus `from_buffer`), although only the trainable initializers' `raw_data`
change between rounds, and a protobuf bytes field of unchanged length sits at the same offset. So
after one ORT export, `ModelSplice.learn` locates each trainable initializer: its `raw_data` must
occur exactly once in the model file and exactly once, 4-byte aligned, in the vector it was exported
from, and these places must tile the vector exactly (no gap, no overlap). Then `render(v)` is the
template with `v`'s slices copied over those places — byte for byte what ORT would write for `v`
(tests/test_export_splice.py). If the parameters cannot be located unambiguously (e.g. two equal
initial biases) `learn` returns None and the caller keeps exporting through ORT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLOAT = 1   # onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class ModelSplice:
    """An ORT export (`template`) and, per trainable initializer, (offset in the vector's bytes,
    length, offset in the model's bytes)."""

    template: bytes
    places: tuple[tuple[int, int, int], ...]
    nbytes: int

    @classmethod
    def learn(cls, model: bytes, vector: np.ndarray) -> ModelSplice | None:
        """The splice for `model` (ORT's export of `vector`), or None if the places are ambiguous."""
        import onnx

        proto = onnx.ModelProto()
        proto.ParseFromString(model)
        vb = memoryview(np.ascontiguousarray(vector, dtype=np.float32)).cast("B").tobytes()
        places = []
        for init in proto.graph.initializer:
            raw = init.raw_data
            if init.data_type != FLOAT or not raw:
                continue
            at = vb.find(raw)
            if at < 0:
                continue    # a frozen (non-trainable) initializer: unchanged, stays as exported
            if at % 4 or vb.find(raw, at + 1) >= 0:
                return None
            where = model.find(raw)
            if where < 0 or model.find(raw, where + 1) >= 0:
                return None
            places.append((at, len(raw), where))
        places.sort()
        end = 0
        for at, n, _ in places:
            if at != end:
                return None     # a gap or an overlap: not exactly the trainable parameters
            end = at + n
        if end != len(vb):
            return None
        return cls(bytes(model), tuple(places), len(vb))

    def render(self, vector: np.ndarray) -> bytearray:
        """The model file ORT would export for `vector` (same length and order as the learned one)."""
        vb = memoryview(np.ascontiguousarray(vector, dtype=np.float32)).cast("B")
        if len(vb) != self.nbytes:
            raise ValueError(f"vector of {len(vb)} bytes; this model's parameters take {self.nbytes}")
        out = bytearray(self.template)
        for at, n, where in self.places:
            out[where:where + n] = vb[at:at + n]
        return out
