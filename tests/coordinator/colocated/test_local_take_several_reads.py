"""coordinator.local_vectors: a co-located raw file of several reads, folded while it is taken, gives the bits
of the fold from its spool copy, and one whose digest fails after its fold leaves the sum to rebuild.

Real files on disk, the real `LocalVectorDir.take` and a real FedAvg `RoundAggregator`; the file is larger
than `READ_STEP` (the coordinator tests' MLP fits in one read), so the per-read hash, check and fold are
exercised across read boundaries — the place a change that splits a take over threads would break.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedort.coordinator.uploads.admission import AdmittedUpdate
from fedort.coordinator.aggregation import Update
from fedort.coordinator.aggregation.decode import decoder_for
from fedort.coordinator.aggregation.strategies import FedAvg
from fedort.coordinator.colocated.local_vectors import READ_STEP, LocalVectorDir
from fedort.common import digests
from fedort.protos.vector_stream import VectorMeta
from fedort.common.errors import VectorError
from fedort.protos.messages import UpdateHeader

LENGTH = 3 * READ_STEP // 4 + 12_345        # float32 values: 3 full reads and a partial one


def admitted(cid: str, vector: np.ndarray, name: str, digest: str, n: int, sent: np.ndarray | None = None) -> AdmittedUpdate:
    """The header a device sends for `vector` (its digest computed from `sent`, default `vector`)."""
    data = np.ascontiguousarray(vector if sent is None else sent, dtype="<f4").tobytes()
    meta = VectorMeta("model", 1, len(vector), digests.digest(digest, data), digest=digest)
    return AdmittedUpdate(UpdateHeader(cid, meta, n, local_file=name), decoder_for("raw"), 4 * len(vector), None)


def handed_over(lv: LocalVectorDir, cid: str, vector: np.ndarray) -> str:
    name = f"{cid}.upload.f32"
    (lv.path / name).write_bytes(np.ascontiguousarray(vector, dtype="<f4").tobytes())
    return name


def one_good_update(tmp_path: Path, g: np.ndarray, x: np.ndarray):
    """A local vector dir, a round's aggregator holding client-a's update `x` (folded while taken) and a `clean`
    one holding it folded from its spool copy, and that copy's path."""
    lv = LocalVectorDir(tmp_path / "lv")
    lv.path.mkdir()
    agg, clean = FedAvg().new_round(g), FedAvg().new_round(g)
    good = tmp_path / "spool" / "client-a.tmp"
    lv.take(admitted("client-a", x, handed_over(lv, "client-a", x), digests.SHA256, 10), good,
            lambda blocks: agg.fold_early("a", blocks, 10))
    agg.add(Update("client-a", 10, "raw", good), early="a")
    clean.add(Update("client-a", 10, "raw", good))
    return lv, agg, clean, good


@pytest.mark.parametrize("digest", [digests.SHA256, *([digests.BLAKE3] if digests.BLAKE3 in digests.available() else [])])
def test_a_file_of_several_reads_folded_while_taken_gives_the_bits_of_the_fold_from_its_spool_copy(tmp_path, digest):
    rng = np.random.default_rng(0)
    g = rng.standard_normal(LENGTH).astype(np.float32)
    updates = {f"client-{i}": (g + rng.standard_normal(LENGTH).astype(np.float32) * np.float32(0.1 * (i + 1)))
               for i in range(3)}
    lv = LocalVectorDir(tmp_path / "lv")
    lv.path.mkdir()
    early, late = FedAvg().new_round(g), FedAvg().new_round(g)
    for i, (cid, x) in enumerate(updates.items()):
        tmp = tmp_path / "spool" / f"{cid}.tmp"
        name = handed_over(lv, cid, x)
        lv.take(admitted(cid, x, name, digest, 10 + 7 * i), tmp,
                lambda blocks, cid=cid, i=i: early.fold_early(cid, blocks, 10 + 7 * i))
        early.add(Update(cid, 10 + 7 * i, "raw", tmp), early=cid)
        late.add(Update(cid, 10 + 7 * i, "raw", tmp))     # folded afterwards, from the spool copy
    assert not early.stale
    assert early.result().vector.tobytes() == late.result().vector.tobytes()


def test_a_file_of_several_reads_whose_digest_fails_after_its_fold_leaves_the_sum_to_rebuild(tmp_path):
    rng = np.random.default_rng(1)
    g = rng.standard_normal(LENGTH).astype(np.float32)
    x, other = (g + np.float32(0.25)).astype(np.float32), (g - np.float32(0.5)).astype(np.float32)
    lv, agg, clean, good = one_good_update(tmp_path, g, x)
    bad = tmp_path / "spool" / "client-b.tmp"
    name = handed_over(lv, "client-b", other)           # right size, but not the bytes the header hashes
    with pytest.raises(VectorError, match="sha256 mismatch"):
        lv.take(admitted("client-b", other, name, digests.SHA256, 17, sent=x), bad,
                lambda blocks: agg.fold_early("b", blocks, 17))
    assert agg.stale                                     # its values went into the sum before the digest failed
    agg.rebuild([Update("client-a", 10, "raw", good)])
    assert agg.result().vector.tobytes() == clean.result().vector.tobytes()


def test_a_file_whose_third_read_holds_a_nan_stops_its_fold_there_and_leaves_the_sum_to_rebuild(tmp_path):
    """The reader thread is ahead of the fold when the finite check fails: the take raises, the reader stops, and
    the first two reads' values in the sum are undone by `rebuild`."""
    rng = np.random.default_rng(2)
    g = rng.standard_normal(LENGTH).astype(np.float32)
    x = (g + np.float32(0.125)).astype(np.float32)
    poisoned = x.copy()
    poisoned[2 * READ_STEP // 4 + 17] = np.nan          # in the third 1 MiB read
    lv, agg, clean, good = one_good_update(tmp_path, g, x)
    seen: list[int] = []

    def fold(blocks):
        def counted():
            for start, values in blocks:
                seen.append(start)
                yield start, values
        agg.fold_early("b", counted(), 17)

    with pytest.raises(VectorError, match="non-finite"):
        lv.take(admitted("client-b", poisoned, handed_over(lv, "client-b", poisoned), digests.SHA256, 17),
                tmp_path / "spool" / "client-b.tmp", fold)
    assert seen and max(seen) < 2 * READ_STEP // 4   # nothing of the third read or later reached the sum
    assert agg.stale
    agg.rebuild([Update("client-a", 10, "raw", good)])
    assert agg.result().vector.tobytes() == clean.result().vector.tobytes()
