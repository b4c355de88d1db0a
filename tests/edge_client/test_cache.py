"""edge_client.cache: content-addressed artifacts, verified on use, atomic writes, vectors, identity."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from fedort.protos.vector_stream import vector_digest
from fedort.common.errors import ArtifactError
from fedort.ort.artifacts import ARTIFACT_FILES, MANIFEST, build_artifacts, sha256_file
from fedort.common.durable import atomic_write
from fedort.edge_client.client.cache import ArtifactCache, identity_key
from fedort.ort.models import mlp
from fedort.ort.session import TrainingSession
from fedort.edge_client.transport.grpc_transport import ArtifactRef
from fedort.protos.vector_stream import vector_digest
from fedort.common.errors import ArtifactError
from fedort.ort.artifacts import ARTIFACT_FILES, MANIFEST, build_artifacts, sha256_file
from fedort.common.durable import atomic_write
from fedort.edge_client.client.cache import ArtifactCache, default_cache_dir, identity_key
from fedort.ort.models import mlp
from fedort.ort.session import TrainingSession
from fedort.edge_client.transport.grpc_transport import ArtifactRef


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _chunks(data: bytes, n: int = 7):
    return [data[i:i + n] for i in range(0, len(data), n)]


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(".")]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("artifacts")
    manifest = build_artifacts(mlp(), folder)
    refs = tuple(ArtifactRef(n, sha256_file(folder / n), (folder / n).stat().st_size) for n in ARTIFACT_FILES)
    return folder, manifest, refs


class _Source:
    """Serves artifact bytes from a folder, counting what was fetched (stands in for the coordinator)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fetched: list[str] = []

    def __call__(self, ref: ArtifactRef):
        self.fetched.append(ref.name)
        return _chunks((self.folder / ref.name).read_bytes(), 1 << 16)


def test_a_blob_is_stored_under_its_digest(tmp_path):
    cache = ArtifactCache(tmp_path)
    data = b"hello artifacts" * 100
    path = cache.put_blob(_sha(data), _chunks(data), size=len(data))
    assert path.name == _sha(data) and path.read_bytes() == data
    assert cache.has_blob(_sha(data))


def test_bytes_that_do_not_match_the_digest_are_never_stored(tmp_path):
    cache = ArtifactCache(tmp_path)
    with pytest.raises(ArtifactError, match="hashes to .* expected"):
        cache.put_blob(_sha(b"the real thing"), _chunks(b"something else"))
    assert not cache.blob_path(_sha(b"the real thing")).exists()
    assert _leftovers(tmp_path) == []


def test_a_truncated_download_is_never_stored(tmp_path):
    cache = ArtifactCache(tmp_path)
    data = b"x" * 100
    with pytest.raises(ArtifactError, match="should be 100 bytes, received 50"):
        cache.put_blob(_sha(data), [data[:50]], size=100)
    assert not cache.has_blob(_sha(data)) and _leftovers(tmp_path) == []


def test_a_corrupt_blob_is_detected_and_removed(tmp_path):
    cache = ArtifactCache(tmp_path)
    data = b"payload" * 50
    path = cache.put_blob(_sha(data), [data])
    path.write_bytes(b"bit rot" + data[7:])
    assert not cache.has_blob(_sha(data))
    assert not path.exists()


def test_model_folder_fetches_once_then_serves_from_the_cache(tmp_path, artifacts):
    folder, manifest, refs = artifacts
    cache, source = ArtifactCache(tmp_path / "cache"), _Source(folder)
    first = cache.model_folder(manifest.model_id, manifest.to_json(), refs, source)
    assert sorted(source.fetched) == sorted(ARTIFACT_FILES)
    again = cache.model_folder(manifest.model_id, manifest.to_json(), refs, source)
    assert again == first and len(source.fetched) == len(ARTIFACT_FILES)
    session = TrainingSession.from_artifacts(first)
    assert session.parameter_count() == manifest.parameter_count
    assert (first / MANIFEST).read_text() == manifest.to_json()


def test_a_corrupted_cached_artifact_is_downloaded_again(tmp_path, artifacts):
    folder, manifest, refs = artifacts
    cache, source = ArtifactCache(tmp_path / "cache"), _Source(folder)
    model = cache.model_folder(manifest.model_id, manifest.to_json(), refs, source)
    target = model / "training_model.onnx"
    raw = bytearray(target.read_bytes())
    raw[100] ^= 0xFF
    cache.blob_path(refs[0].sha256).write_bytes(bytes(raw))  # the blob and its link now disagree with the digest
    source.fetched.clear()
    model = cache.model_folder(manifest.model_id, manifest.to_json(), refs, source)
    assert source.fetched == ["training_model.onnx"]
    assert sha256_file(model / "training_model.onnx") == refs[0].sha256
    TrainingSession.from_artifacts(model)


def test_a_failed_download_leaves_no_partial_file(tmp_path, artifacts):
    folder, manifest, refs = artifacts
    cache = ArtifactCache(tmp_path / "cache")

    def broken(ref):
        yield (folder / ref.name).read_bytes()[:10]
        raise ConnectionResetError("stream cut")

    with pytest.raises(ConnectionResetError):
        cache.model_folder(manifest.model_id, manifest.to_json(), refs, broken)
    assert not any(cache.has_blob(r.sha256) for r in refs)
    assert _leftovers(cache.root) == []


def test_artifact_names_cannot_escape_the_model_folder(tmp_path, artifacts):
    folder, manifest, refs = artifacts
    bad = (ArtifactRef("../evil", refs[0].sha256, refs[0].size),)
    with pytest.raises(ArtifactError, match="plain file name"):
        ArtifactCache(tmp_path).model_folder(manifest.model_id, manifest.to_json(), bad, _Source(folder))


def test_a_vector_is_found_by_its_digest(tmp_path):
    cache = ArtifactCache(tmp_path)
    v = np.arange(1000, dtype=np.float32)
    cache.put_vector(vector_digest(v), v)
    fresh = ArtifactCache(tmp_path)  # a new process: from disk, not from the in-memory memo
    np.testing.assert_array_equal(fresh.get_vector(vector_digest(v), 1000), v)
    assert fresh.get_vector(vector_digest(v + 1), 1000) is None


def test_a_corrupted_vector_file_is_ignored_and_removed(tmp_path):
    cache = ArtifactCache(tmp_path)
    v = np.ones(64, dtype=np.float32)
    digest = vector_digest(v)
    cache.put_vector(digest, v)
    cache.vector_path(digest).write_bytes(np.zeros(64, dtype=np.float32).tobytes())
    assert ArtifactCache(tmp_path).get_vector(digest, 64) is None
    assert not cache.vector_path(digest).exists()


def test_only_the_newest_vectors_are_kept(tmp_path):
    cache = ArtifactCache(tmp_path, keep_vectors=2)
    digests = []
    for i in range(4):
        v = np.full(8, i, dtype=np.float32)
        digests.append(vector_digest(v))
        cache.put_vector(digests[-1], v)
    kept = {p.name for p in (tmp_path / "vectors").glob("*.f32")}
    assert len(kept) == 2 and f"{digests[-1].hex()}.f32" in kept


def test_identity_is_kept_per_coordinator_and_device_name(tmp_path):
    cache = ArtifactCache(tmp_path)
    a, b = identity_key("127.0.0.1:7420", "phone"), identity_key("127.0.0.1:7421", "phone")
    assert a != b and "/" not in a
    cache.save_identity(a, client_id="c-0123456789ab")
    assert ArtifactCache(tmp_path).load_identity(a) == {"client_id": "c-0123456789ab"}
    assert cache.load_identity(b) == {}


def test_atomic_write_never_leaves_a_partial_file(tmp_path):
    target = tmp_path / "file.bin"
    atomic_write(target, [b"old"])

    def interrupted():
        yield b"new data, half"
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(target, interrupted())
    assert target.read_bytes() == b"old" and _leftovers(tmp_path) == []


def test_an_identity_lock_is_exclusive_until_released(tmp_path):
    from fedort.common.errors import ConfigError

    cache = ArtifactCache(tmp_path)
    held = cache.lock_identity("k")
    with pytest.raises(ConfigError, match="same identity"):
        cache.lock_identity("k")
    other = cache.lock_identity("another-key")
    held.release()
    cache.lock_identity("k").release()
    other.release()
