"""protos/update_codecs/spec.py: codec specs parse to one canonical spelling; a run's allowed list admits specs."""

from __future__ import annotations

import pytest

from fedort.protos.update_codecs import REGISTRY, allows, get_codec, parse_codec
from fedort.protos.update_codecs.spec import NAMES


@pytest.mark.parametrize("text,canonical", [("raw", "raw"), ("int8:256", "int8"), ("int8:1024", "int8:1024"),
                                            ("topk:0.010", "topk:0.01"), ("zstd+topk:1", "zstd+topk:1.0"),
                                            ("zstd+fp16", "zstd+fp16")])
def test_canonical_spelling(text, canonical):
    assert parse_codec(text).canonical == canonical == get_codec(text).spec.canonical


def test_every_name_has_a_registered_codec():
    assert set(REGISTRY) == set(NAMES)


@pytest.mark.parametrize("allowed,spec,ok", [
    ([], "raw", True), ([], "fp16", False),
    (["topk"], "topk:0.01", True), (["topk"], "zstd+topk:0.01", False), (["zstd+topk"], "zstd+topk:0.5", True),
    (["topk:0.01"], "topk:0.010", True), (["topk:0.01"], "topk:0.02", False),
    (["int8"], "int8:1024", True), (["int8:256"], "int8", True), (["int8:256"], "int8:512", False),
    (["fp16", "bf16"], "bf16", True), (["garbage:x"], "int8", False),
])
def test_allowed_list(allowed, spec, ok):
    assert allows(allowed, parse_codec(spec)) is ok
