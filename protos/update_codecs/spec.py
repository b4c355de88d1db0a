"""Codec specs: the string in `VectorHeader.codec` that says how a vector's payload is encoded.

Grammar (case-sensitive, no spaces):

    spec   := ["zstd+"] name [":" param]
    name   := "raw" | "fp16" | "bf16" | "int8" | "topk"
    param  := int8: values per block (16..65536, default 256) | topk: fraction F in (0, 1] (required)

Examples: `raw`, `fp16`, `bf16`, `int8`, `int8:1024`, `topk:0.01`, `zstd+int8`, `zstd+topk:0.01`.
`zstd+X` is the payload of X compressed as one zstd frame (lossless). The canonical spelling
(`CodecSpec.canonical`, what goes on the wire) drops a default parameter: `int8:256` -> `int8`.
A run's allowed list (`JoinReply.upload_codecs`) may name a family without its parameter
(`topk`, `zstd+topk`), which then allows any parameter; see `allows`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from fedort.common.errors import VectorError

NAMES = ("raw", "fp16", "bf16", "int8", "topk")
ZSTD_PREFIX = "zstd+"
INT8_DEFAULT_BLOCK = 256
INT8_BLOCK_RANGE = (16, 1 << 16)


@dataclass(frozen=True)
class CodecSpec:
    """A parsed codec spec: the base codec, its parameter, and whether zstd wraps its payload."""

    name: str
    param: float | int | None = None
    zstd: bool = False

    @property
    def canonical(self) -> str:
        head = ZSTD_PREFIX if self.zstd else ""
        if self.name == "int8" and self.param not in (None, INT8_DEFAULT_BLOCK):
            return f"{head}int8:{self.param}"
        if self.name == "topk":
            return f"{head}topk:{self.param!r}"
        return f"{head}{self.name}"

    @property
    def lossy(self) -> bool:
        """Lossy codecs encode the delta `update - global` (see `VectorHeader.base_sha256`)."""
        return self.name != "raw"

    def __str__(self) -> str:
        return self.canonical


def parse_codec(text: str) -> CodecSpec:
    """Parse a codec spec (grammar in the module docstring); VectorError says what is wrong."""
    if not isinstance(text, str) or not text:
        raise VectorError(f"codec spec must be a non-empty string like 'raw', 'int8' or 'topk:0.01', got {text!r}")
    body, zstd = (text[len(ZSTD_PREFIX) :], True) if text.startswith(ZSTD_PREFIX) else (text, False)
    name, sep, param = body.partition(":")
    if name not in NAMES:
        raise VectorError(
            f"unknown codec {name!r} in {text!r}; expected one of {list(NAMES)}, optionally prefixed by {ZSTD_PREFIX!r}"
        )
    if name == "topk":
        if not sep:
            raise VectorError(f"codec {text!r}: topk needs a fraction, e.g. 'topk:0.01'")
        try:
            fraction = float(param)
        except ValueError:
            raise VectorError(f"codec {text!r}: topk fraction must be a number in (0, 1], got {param!r}") from None
        if not (math.isfinite(fraction) and 0.0 < fraction <= 1.0):
            raise VectorError(f"codec {text!r}: topk fraction must be in (0, 1], got {fraction}")
        return CodecSpec("topk", fraction, zstd)
    if name == "int8":
        if not sep:
            return CodecSpec("int8", INT8_DEFAULT_BLOCK, zstd)
        lo, hi = INT8_BLOCK_RANGE
        if not param.isdigit() or not lo <= int(param) <= hi:
            raise VectorError(f"codec {text!r}: int8 block size must be an integer in [{lo}, {hi}], got {param!r}")
        return CodecSpec("int8", int(param), zstd)
    if sep:
        raise VectorError(f"codec {text!r}: {name} takes no parameter")
    return CodecSpec(name, None, zstd)


def allows(allowed: Iterable[str], spec: CodecSpec) -> bool:
    """Whether a run's allowed list admits `spec`: `raw` always; an entry without a parameter
    (`topk`, `int8`, `zstd+topk`) admits every parameter of that family (with the same zstd prefix);
    an entry with one admits exactly that spec. Unparseable entries admit nothing."""
    if spec.canonical == "raw":
        return True
    for entry in allowed:
        body = entry[len(ZSTD_PREFIX) :] if entry.startswith(ZSTD_PREFIX) else entry
        if entry.startswith(ZSTD_PREFIX) != spec.zstd or body.partition(":")[0] != spec.name:
            continue
        if ":" not in body:
            return True
        try:
            if parse_codec(entry).canonical == spec.canonical:
                return True
        except VectorError:
            continue
    return False


__all__ = ["CodecSpec", "INT8_DEFAULT_BLOCK", "NAMES", "ZSTD_PREFIX", "allows", "parse_codec"]
