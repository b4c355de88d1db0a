"""edge_client.local_vectors: an update file is written and hashed in the same pass.

The header of a co-located upload leaves its digest value empty (`EncodedUpdate.stream(digested=False)`);
the bytes are hashed block by block as they are written, so the file and the header's digest always
describe the same bytes, whatever the size, body type and digest algorithm.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fedort.edge_client.uploads.local_vectors import WRITE_BLOCK, _write_file, with_digest
from fedort.edge_client.uploads.update_codec import EncodedUpdate
from fedort.common import digests

ALGORITHMS = [digests.SHA256] + ([digests.BLAKE3] if digests.BLAKE3 in digests.available() else [])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("nbytes", [4, WRITE_BLOCK, WRITE_BLOCK + 4, 3 * WRITE_BLOCK - 12])
def test_the_written_file_and_the_digest_cover_the_same_bytes(tmp_path, algorithm, nbytes):
    body = np.random.default_rng(nbytes).standard_normal(nbytes // 4).astype(np.float32)
    hasher = digests.new(algorithm)
    _write_file(tmp_path / "u.f32", body, None, hasher)
    assert (tmp_path / "u.f32").read_bytes() == body.tobytes()
    assert hasher.digest() == digests.digest(algorithm, body.tobytes())


def test_a_recycled_file_longer_than_the_update_is_cut_to_size_and_hashed_as_written(tmp_path):
    free = tmp_path / ".free"
    free.mkdir()
    (free / "old").write_bytes(b"\xff" * (2 * WRITE_BLOCK + 100))       # a bigger update's spool file
    payload = bytes(range(256)) * 1000                                  # a codec payload: bytes, not floats
    hasher = digests.new(digests.SHA256)
    _write_file(tmp_path / "u.f32", payload, free, hasher)
    assert (tmp_path / "u.f32").read_bytes() == payload and not list(free.iterdir())
    assert hasher.digest() == hashlib.sha256(payload).digest()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_header_left_undigested_gets_the_digest_of_its_body_and_a_digested_one_is_kept(algorithm):
    trained = np.arange(1000, dtype=np.float32)
    update = EncodedUpdate("raw", vector=trained, length=1000, trained_from=b"\x01" * 32)
    pending, body = update.stream("c0", "m", 3, 10, {}, 1 << 20, announced=[algorithm], digested=False)
    full, _ = update.stream("c0", "m", 3, 10, {}, 1 << 20, announced=[algorithm])
    assert pending.vector.sha256 == b"" and full.vector.sha256 == digests.digest(algorithm, trained.tobytes())
    assert with_digest(pending, body) == full
    assert with_digest(full, np.zeros(1000, np.float32)) is full
