"""The registry `codec name -> Codec class`, and `get_codec(spec)`, the one way to obtain a codec."""

from __future__ import annotations

from fedort.protos.update_codecs.base import Codec
from fedort.protos.update_codecs.bf16 import Bf16Codec
from fedort.protos.update_codecs.fp16 import Fp16Codec
from fedort.protos.update_codecs.int8 import Int8Codec
from fedort.protos.update_codecs.raw import RawCodec
from fedort.protos.update_codecs.spec import CodecSpec, parse_codec
from fedort.protos.update_codecs.topk import TopKCodec
from fedort.protos.update_codecs.zstd import ZstdCodec

REGISTRY: dict[str, type[Codec]] = {
    "raw": RawCodec,
    "fp16": Fp16Codec,
    "bf16": Bf16Codec,
    "int8": Int8Codec,
    "topk": TopKCodec,
}


def get_codec(spec: str | CodecSpec) -> Codec:
    """The codec for a spec string (`parse_codec` grammar) or a parsed CodecSpec; VectorError if unknown."""
    parsed = parse_codec(spec) if isinstance(spec, str) else spec
    base = REGISTRY[parsed.name](CodecSpec(parsed.name, parsed.param, False))
    return ZstdCodec(parsed, base) if parsed.zstd else base


__all__ = ["REGISTRY", "get_codec"]
