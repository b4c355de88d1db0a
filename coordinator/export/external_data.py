"""Per-round export as ONNX external data: model.onnx names the committed global vector's own bytes.

A committed global vector `vectors/round-000{N+1}.f32` is raw little-endian float32, written once
and never changed in place (state_layout), and the splice (export_splice) knows where each
trainable initializer's bytes sit in it. So for a model whose trainable parameters take at least
`external_min_bytes` (the coordinator's `export_external_bytes`), round N's export is

    models/round-000N/model.onnx        graph and frozen initializers inline; each trainable initializer
                                        has data_location EXTERNAL, external_data {location: model.onnx.data,
                                        offset, length}: the same bytes every round (serialized once)
    models/round-000N/model.onnx.data   a hard link to vectors/round-000{N+1}.f32

instead of a 20 MB spliced copy per 5 M round: no copy, no hash (model.json records the data
file's sha256, which is the committed vector's), no fresh page-cache pages (costly on a VM whose
freed pages go back to the host).
`onnxruntime.InferenceSession(path)` and `onnx.load(path)` read it unchanged; the folder (both
files) travels together. An older round's folder stays valid: its link keeps its vector's bytes.
The link is made under a temporary name and renamed over the data file, so a re-export (recovery)
replaces it atomically. Where hard links are impossible (another filesystem, EXDEV; a filesystem
without them, EPERM), the exporter writes the self-contained spliced model instead.
"""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from fedort.common.errors import CorruptStateError
from fedort.coordinator.export.splice import BASE, FLOAT, ModelSplice

# link(2) errors that say "no hard link here": another filesystem, a filesystem without hard links, too many links
NO_LINKS = frozenset({errno.EXDEV, errno.EPERM, errno.EACCES, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})
DATA_FILE = "model.onnx.data"  # the external data file beside model.onnx (a hard link to the vector file)
EXTERNAL_MIN_BYTES = 1 << 20  # default export_external_bytes: 1 MiB of parameters (262,144 float32)


@dataclass(frozen=True)
class ExternalModel:
    """The model.onnx of every external-data export of one model, and its sha256."""

    model: bytes
    sha256: str

    @classmethod
    def of(cls, splice: ModelSplice, location: str = DATA_FILE) -> ExternalModel | None:
        """The splice's model with each trainable initializer's bytes moved out to `location` at that
        initializer's offset in the vector; None if the initializers do not match the splice's places."""
        import onnx

        proto = onnx.ModelProto()
        proto.ParseFromString(splice.template)
        wanted = {(at, n) for at, n, _ in splice.places}
        probe = ModelSplice.probe(splice.nbytes // 4).tobytes()  # what the template's trainable bytes are
        moved = set()
        for init in proto.graph.initializer:
            raw = init.raw_data
            if init.data_type != FLOAT or len(raw) < 4:
                continue
            place = (4 * (int.from_bytes(raw[:4], "little") - BASE), len(raw))
            if place not in wanted or raw != probe[place[0] : place[0] + place[1]]:
                continue  # a frozen initializer: stays inline
            if place in moved:
                return None  # two initializers claim one place (learn rules this out)
            moved.add(place)
            init.ClearField("raw_data")
            init.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(place[0])), ("length", str(place[1]))):
                entry = init.external_data.add()
                entry.key, entry.value = key, value
        if moved != wanted:
            return None
        model = proto.SerializeToString()
        return cls(model, hashlib.sha256(model).hexdigest())


def link_data(vector_file: Path, folder: Path, nbytes: int) -> Path:
    """Hard-link `vector_file` (of `nbytes` bytes) as folder/DATA_FILE, atomically replacing an earlier one.

    OSError with an errno in NO_LINKS where this filesystem cannot link it (the caller then writes
    self-contained models); CorruptStateError if the file does not hold `nbytes` bytes."""
    size = os.stat(vector_file).st_size
    if size != nbytes:
        raise CorruptStateError(f"state dir is corrupt: {vector_file} holds {size} bytes, the vector {nbytes}")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / DATA_FILE
    tmp = folder / f".{DATA_FILE}.tmp"  # one name: exports run one at a time (state dir lock), a crash's is reused
    tmp.unlink(missing_ok=True)
    os.link(vector_file, tmp)
    try:
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)  # rename(2) leaves both names when they already link the same file
    return target
