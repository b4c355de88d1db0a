"""Shared codec test vectors: inputs and the exact bytes the Python codecs give for them.

    python -m fedort.protos.codec_vectors            # rewrites protos/testdata/codec_vectors.json
    python -m fedort.protos.codec_vectors --check    # exits 1 if the file is not what the codecs give now

A second implementation of the wire (the TypeScript client in edge_client/web) encodes the same
inputs and must produce the same bytes: each payload and the serialized UpdateHeader it is sent
with. The file also pins the two seeded NumPy streams a device draws from: int8's rounding (`default_rng([seed, 0x1C0DEC]).random()`) and the
trainer's shuffle (`default_rng(seed).permutation(n)` per epoch). Floats travel as hex of their
little-endian bytes, so nothing is lost to decimal printing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedort.protos.messages import Metric, UpdateHeader
from fedort.protos.update_codecs import describe_payload, get_codec
from fedort.protos.vector_stream import describe

PATH = Path(__file__).resolve().parent / "testdata" / "codec_vectors.json"
ROUNDING_STREAM = 0x1C0DEC  # edge_client/uploads/update_codec.py's stream id for int8 rounding
F32 = np.dtype("<f4")
#: what every case's update header names besides its vectors (the header bytes are pinned too)
HEADER: dict[str, Any] = {
    "client_id": "device-7",
    "model_id": "8a009eb0e62bca4f",
    "round": 3,
    "num_examples": 250,
    "metrics": {"train_loss": 0.5},
}


def _f32(values) -> np.ndarray:
    return np.asarray(values, dtype=F32)


def _hex(a: np.ndarray | bytes) -> str:
    return (a.tobytes() if isinstance(a, np.ndarray) else bytes(a)).hex()


def _inputs() -> list[tuple[str, str, int, np.ndarray, np.ndarray]]:
    """(name, codec, seed, global, trained) of every case."""
    g = np.random.default_rng(20240601)
    tiny = 2.0**-24
    fp16_edges = _f32(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
            -65504.0,
            65519.0,
            1.0 + 2**-11,
            1.0 + 3 * 2**-11,
            1.0 + 2**-11 + 2**-20,
            tiny,
            tiny / 2,
            tiny * 1.5,
            tiny * 2.5,
            2.0**-25,
            2.0**-26,
            2.0**-14,
            2.0**-14 - tiny / 2,
            3.0e-8,
            -5.9604645e-8,
            1e-40,
            0.1,
            -0.3333333,
            1234.567,
        ]
    )
    cases = [
        ("raw-small", "raw", 0, np.zeros(5, F32), _f32([0.0, -0.0, 1.5, -2.25, 3.4028235e38])),
        ("raw-random", "raw", 0, np.zeros(37, F32), g.standard_normal(37).astype(F32)),
        ("fp16-edges", "fp16", 0, np.zeros(len(fp16_edges), F32), fp16_edges),
        ("fp16-delta", "fp16", 0, g.standard_normal(50).astype(F32), g.standard_normal(50).astype(F32)),
    ]
    base = g.standard_normal(600).astype(F32)
    moved = base + (0.01 * g.standard_normal(600)).astype(F32)
    moved[256:512] = base[256:512]  # one all-zero delta block
    cases += [
        ("int8-default", "int8", 7, base, moved),
        ("int8-block16", "int8:16", 123456789, base[:100], moved[:100]),
        ("int8-big-seed", "int8", 2**63 + 12345, base[:300], moved[:300]),
        ("int8-tiny", "int8:16", 1, np.zeros(20, F32), _f32([1e-45, -1e-45, 1e-40] + [0.0] * 17)),
        ("int8-short", "int8", 42, np.zeros(3, F32), _f32([0.5, -0.25, 0.125])),
    ]
    return cases


def _header(codec: str, global_vector: np.ndarray, trained: np.ndarray, payload: bytes) -> bytes:
    """The serialized UpdateHeader a device sends with this payload (as edge_client/uploads/update_headers.py builds it)."""
    base = hashlib.sha256(global_vector.tobytes()).digest()
    h = HEADER
    if codec == "raw":
        meta = describe(trained, h["model_id"], h["round"])
    else:
        meta = describe_payload(
            payload, model_id=h["model_id"], round=h["round"], length=len(trained), codec=codec, base_sha256=base
        )
    metrics = {k: Metric(v, True) for k, v in h["metrics"].items()}
    return UpdateHeader(h["client_id"], meta, h["num_examples"], metrics, base).to_pb().SerializeToString()


def build() -> dict:
    codecs = []
    for name, codec, seed, global_vector, trained in _inputs():
        spec = get_codec(codec)
        if codec == "raw":
            payload = spec.encode(trained)
        else:
            delta = np.subtract(trained, global_vector, dtype=F32)
            payload = spec.encode(delta, np.random.default_rng([int(seed), ROUNDING_STREAM]))
        codecs.append(
            {
                "name": name,
                "codec": spec.spec.canonical,
                "seed": str(seed),
                "length": len(trained),
                "global": _hex(global_vector),
                "trained": _hex(trained),
                "payload": _hex(payload),
                "payload_sha256": hashlib.sha256(payload).hexdigest(),
                "update_header": _hex(_header(codec, global_vector, trained, payload)),
            }
        )
    random = [
        {"seed": [str(s) for s in seed], "values": _hex(np.random.default_rng(seed).random(6))}
        for seed in ([0], [7, ROUNDING_STREAM], [2**40 + 3], [2**64 + 5, 9, 10, 11, 12])
    ]
    shuffles = []
    for seed, n, epochs in ((0, 10, 2), (42, 97, 3), (2**33 + 1, 1000, 1)):
        rng = np.random.default_rng(seed)
        shuffles.append({"seed": str(seed), "n": n, "epochs": [rng.permutation(n).tolist() for _ in range(epochs)]})
    return {
        "about": "generated by `python -m fedort.protos.codec_vectors`; do not edit",
        "header": HEADER,
        "codecs": codecs,
        "random": random,
        "shuffles": shuffles,
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check the file is current")
    parser.add_argument("--out", type=Path, default=PATH)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is not current: run python -m fedort.protos.codec_vectors", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
