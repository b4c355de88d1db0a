"""The shared codec test vectors (protos/testdata/codec_vectors.json) are what the Python codecs give today."""

from fedort.protos import codec_vectors


def test_codec_vectors_file_is_current():
    assert codec_vectors.PATH.read_text() == codec_vectors.render(), \
        "protos/testdata/codec_vectors.json is stale: run python -m fedort.protos.codec_vectors"
