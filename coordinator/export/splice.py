"""Per-round inference export without ORT: the last ORT export's bytes with the parameters replaced.

ORT's `export_model_for_inferencing` re-serializes the whole pruned graph every round (plus
`from_buffer`), although only the trainable initializers' `raw_data`
change between rounds, and a protobuf bytes field of unchanged length sits at the same offset. So
once, the coordinator exports a *probe* vector through ORT (`probe(n)`: n distinct finite float32
values whose bits are BASE + i, so every value names its own index); `learn` reads back each float
initializer: its first value's bits give its offset in the vector, its bytes must equal that slice
and occur exactly once in the file, and the slices must tile the vector exactly (no gap, no
overlap). Then `render(v)` is the template with `v`'s slices copied over those places. The caller
also checks, once, that `render` of the real vector equals ORT's export of it byte for byte
(tests/coordinator/export/test_export_splice.py), and otherwise keeps exporting through ORT. The exporter writes
`chunks(v)` (the same bytes, in pieces of at most STEP, views of the template and of `v`) straight
into the file and its sha256 while each piece is in cache: no 20 MB model copy in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

FLOAT = 1  # onnx.TensorProto.FLOAT
BASE = 0x00800000  # the smallest normal float32's bits: probe value i has bits BASE + i
STEP = 1 << 20  # bytes per piece of `chunks`: written and hashed while in cache


@dataclass(frozen=True)
class ModelSplice:
    """An ORT export (`template`) and, per trainable initializer, (offset in the vector's bytes,
    length, offset in the model's bytes)."""

    template: bytes
    places: tuple[tuple[int, int, int], ...]
    nbytes: int

    @staticmethod
    def probe(n: int) -> np.ndarray:
        """n distinct normal float32 values (bits BASE + i; finite for any n below 2**31)."""
        return (np.arange(n, dtype=np.uint32) + np.uint32(BASE)).view(np.float32)

    @classmethod
    def learn(cls, model: bytes, n: int) -> ModelSplice | None:
        """The splice for `model` (ORT's export of `probe(n)`), or None if the places are not exact."""
        import onnx

        proto = onnx.ModelProto()
        proto.ParseFromString(model)
        vb = cls.probe(n).data.cast("B")
        places = []
        for init in proto.graph.initializer:
            raw = init.raw_data
            if init.data_type != FLOAT or len(raw) < 4 or len(raw) % 4:
                continue
            at = 4 * (int.from_bytes(raw[:4], "little") - BASE)
            if not (0 <= at and at + len(raw) <= len(vb) and vb[at : at + len(raw)] == raw):
                continue  # a frozen (non-trainable) initializer: unchanged, stays as exported
            where = model.find(raw)
            if where < 0 or model.find(raw, where + 1) >= 0:
                return None
            places.append((at, len(raw), where))
        places.sort()
        end = 0
        for at, n_bytes, _ in places:
            if at != end:
                return None  # a gap or an overlap: not exactly the trainable parameters
            end = at + n_bytes
        if end != len(vb):
            return None
        return cls(bytes(model), tuple(places), len(vb))

    def render(self, vector: np.ndarray) -> bytearray:
        """The model file ORT would export for `vector` (same length and order as the learned one)."""
        vb = np.ascontiguousarray(vector, dtype=np.float32).data.cast("B")
        if len(vb) != self.nbytes:
            raise ValueError(f"vector of {len(vb)} bytes; this model's parameters take {self.nbytes}")
        out = bytearray(self.template)
        for at, n, where in self.places:
            out[where : where + n] = vb[at : at + n]
        return out

    def chunks(self, vector: np.ndarray, step: int = STEP) -> Iterator[memoryview]:
        """`render(vector)` as consecutive views of at most `step` bytes (of the template and of `vector`)."""
        vb = np.ascontiguousarray(vector, dtype=np.float32).data.cast("B")
        if len(vb) != self.nbytes:
            raise ValueError(f"vector of {len(vb)} bytes; this model's parameters take {self.nbytes}")
        template, pos = memoryview(self.template), 0
        for at, n, where in sorted(self.places, key=lambda p: p[2]):  # in file order
            yield from _steps(template[pos:where], step)
            yield from _steps(vb[at : at + n], step)
            pos = where + n
        yield from _steps(template[pos:], step)


def _steps(view: memoryview, step: int) -> Iterator[memoryview]:
    for start in range(0, len(view), step):
        yield view[start : start + step]
