"""edge_client.local_vectors: the update files of one process are written one at a time.

A simulation worker hosts many clients; files written side by side share the disk and all finish
late, so the first update reaches the coordinator later than it would alone. Here a first write is
held part-way (its hasher blocks); a second one, started meanwhile, does not begin until the first
is complete, and both files end whole."""

from __future__ import annotations

import threading

import numpy as np

from fedort.edge_client.uploads import local_vectors
from fedort.common import digests


class _Hasher:
    """A sha256 that signals its first block and, if given a gate, waits on it there."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.started, self.gate, self.inner = threading.Event(), gate, digests.new()

    def update(self, block) -> None:
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(30), "the test never released the first write"
        self.inner.update(block)


def test_a_second_update_file_waits_until_the_first_is_written(tmp_path):
    first, second = (np.full(200_000, v, dtype=np.float32) for v in (1.0, 2.0))
    release = threading.Event()
    h1, h2 = _Hasher(release), _Hasher()
    t1 = threading.Thread(target=local_vectors._write_file, args=(tmp_path / "a.f32", first, None, h1))
    t2 = threading.Thread(target=local_vectors._write_file, args=(tmp_path / "b.f32", second, None, h2))
    t1.start()
    try:
        assert h1.started.wait(30)
        t2.start()
        assert not h2.started.wait(0.3)               # bounded look: the second has not begun its file
        assert not (tmp_path / "b.f32").exists()
    finally:
        release.set()
        t1.join(30)
        if t2.ident is not None:   # started
            t2.join(30)
    assert not t1.is_alive() and not t2.is_alive()
    assert (tmp_path / "a.f32").read_bytes() == first.tobytes()
    assert (tmp_path / "b.f32").read_bytes() == second.tobytes()
