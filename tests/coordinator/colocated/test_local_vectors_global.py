"""A co-located device's global vector: read from the coordinator's directory, verified once per process and round.

`LocalVectors.read_global` trusts a file only if it has the model's length and the Task's sha256;
`ArtifactCache` (shared by the virtual clients of a simulation worker) then keeps that verified
array in memory, so the other clients of the round neither read nor hash the file again, and a file
changed after the check can no longer reach them. The memory holds one vector: the newest.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fedort.edge_client.client.cache import ArtifactCache
from fedort.edge_client.uploads.local_vectors import LocalVectors


def publish(directory, vector: np.ndarray) -> bytes:
    """What the coordinator's LocalVectorDir.publish leaves: global/<sha256 hex>.f32."""
    digest = hashlib.sha256(vector.tobytes()).digest()
    (directory / "global").mkdir(parents=True, exist_ok=True)
    (directory / "global" / f"{digest.hex()}.f32").write_bytes(vector.tobytes())
    return digest


@pytest.fixture
def vector() -> np.ndarray:
    return np.random.default_rng(3).standard_normal(1000).astype(np.float32)


def test_a_published_vector_is_read_when_length_and_digest_match(tmp_path, vector):
    digest = publish(tmp_path, vector)
    np.testing.assert_array_equal(LocalVectors(tmp_path).read_global(digest, len(vector)), vector)


@pytest.mark.parametrize("damage", ["flip", "truncate", "grow", "remove"])
def test_a_file_that_does_not_match_its_name_is_refused(tmp_path, vector, damage):
    digest = publish(tmp_path, vector)
    path = tmp_path / "global" / f"{digest.hex()}.f32"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[17] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[:-4]))
    elif damage == "grow":
        path.write_bytes(bytes(data) + b"\0\0\0\0")
    else:
        path.unlink()
    assert LocalVectors(tmp_path).read_global(digest, len(vector)) is None   # the device downloads it instead


def test_a_swapped_file_under_the_name_of_another_vector_is_refused(tmp_path, vector):
    digest = publish(tmp_path, vector)
    other = vector + 1
    (tmp_path / "global" / f"{digest.hex()}.f32").write_bytes(other.tobytes())   # same size, other bytes
    assert LocalVectors(tmp_path).read_global(digest, len(vector)) is None


def test_the_clients_of_one_process_share_the_verified_vector_and_never_see_a_later_change(tmp_path, vector):
    local, cache = LocalVectors(tmp_path / "local"), ArtifactCache(tmp_path / "cache")
    digest = publish(tmp_path / "local", vector)
    first = local.read_global(digest, len(vector))                 # the round's first client: read + sha256
    cache.put_vector(digest, first, persist=False)
    path = tmp_path / "local" / "global" / f"{digest.hex()}.f32"
    path.write_bytes((vector * 2).tobytes())                       # changed after the check
    again = cache.get_vector(digest, len(vector))                  # every later client of the round
    assert again is first and not again.flags.writeable
    np.testing.assert_array_equal(again, vector)
    assert LocalVectors(tmp_path / "local").read_global(digest, len(vector)) is None   # a fresh reader refuses it


def test_the_process_keeps_only_the_newest_verified_vector_in_memory(tmp_path, vector):
    local, cache = LocalVectors(tmp_path / "local"), ArtifactCache(tmp_path / "cache")
    digests = []
    for k in range(4):                                             # four rounds, four global vectors
        v = vector + k
        digests.append(publish(tmp_path / "local", v))
        cache.put_vector(digests[-1], local.read_global(digests[-1], len(v)), persist=False)
    assert cache.get_vector(digests[-1], len(vector)) is not None
    assert all(cache.get_vector(d, len(vector)) is None for d in digests[:-1])   # not kept, not on disk either
    assert not (tmp_path / "cache" / "vectors").exists()


def test_a_held_global_vector_never_changes_and_released_memory_takes_a_later_round(tmp_path, vector):
    local = LocalVectors(tmp_path)
    rounds = [vector + k for k in range(4)]
    first = local.read_global(publish(tmp_path, rounds[0]), len(vector))   # e.g. a client still training from it
    later = [local.read_global(publish(tmp_path, v), len(v)) for v in rounds[1:]]
    np.testing.assert_array_equal(first, rounds[0])
    assert not any(np.shares_memory(first, x) for x in later)
    memory = [a.base for a in [first, *later]]             # what each array's bytes live in
    del first, later
    again = local.read_global(publish(tmp_path, vector - 1), len(vector))
    assert any(again.base is m for m in memory if m is not None)
    np.testing.assert_array_equal(again, vector - 1)
