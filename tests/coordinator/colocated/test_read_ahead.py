"""`coordinator.read_ahead`: a file read and hashed in a thread a few steps ahead of its consumer."""

import hashlib
import os
import threading

import pytest

from fedort.coordinator.colocated.read_ahead import SLOTS, read_ahead
from fedort.common.errors import VectorError

STEP = 4096


@pytest.fixture
def data_file(tmp_path):
    data = os.urandom(10 * STEP + 123)
    path = tmp_path / "update.f32"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


@pytest.mark.parametrize("step", [STEP, 1 << 20], ids=["read ahead", "one part, read in place"])
def test_the_parts_are_the_file_in_order_and_the_digest_is_of_every_byte(data_file, step):
    fd, data = data_file
    h = hashlib.sha256()
    with read_ahead(fd, len(data), h, "update", step) as parts:
        got = b"".join(bytes(p) for p in parts)
    assert got == data
    assert h.digest() == hashlib.sha256(data).digest()


@pytest.mark.parametrize("step", [STEP, 1 << 20], ids=["read ahead", "one part, read in place"])
def test_a_file_shorter_than_announced_raises_naming_where_it_ended(data_file, step):
    fd, data = data_file
    with pytest.raises(VectorError, match=f"update ended after {len(data)} of {len(data) + 8} bytes"):
        with read_ahead(fd, len(data) + 8, hashlib.sha256(), "update", step) as parts:
            for _ in parts:
                pass


def test_a_consumer_that_stops_early_stops_the_reader_before_it_reads_the_rest(data_file):
    fd, data = data_file
    with read_ahead(fd, len(data), hashlib.sha256(), "update", STEP) as parts:
        next(iter(parts))
    # the reader ran at most SLOTS parts ahead of the one part used, then stopped
    assert os.lseek(fd, 0, os.SEEK_CUR) <= (1 + SLOTS) * STEP


def test_more_files_at_once_than_reader_threads_all_complete(tmp_path):
    """Each reader waits only for its own consumer: 12 consumers, each holding its first part until all have
    one, cannot starve each other (the executor has fewer threads than that)."""
    n = 12
    barrier = threading.Barrier(n, timeout=30)
    results = [None] * n

    def consume(i):
        data = os.urandom(6 * STEP)
        path = tmp_path / f"u{i}.f32"
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            with read_ahead(fd, len(data), hashlib.sha256(), "update", STEP) as parts:
                out = []
                for k, p in enumerate(parts):
                    out.append(bytes(p))
                    if k == 0:
                        barrier.wait()
                results[i] = b"".join(out) == data
        finally:
            os.close(fd)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [True] * n
