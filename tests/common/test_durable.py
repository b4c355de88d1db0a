"""fedort.common.durable: the one atomic_write — a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from fedort.common.durable import (WRITEBACK_STEP, atomic_write, atomic_write_json, drop_cached, fsync_dir, fsync_file,
                            fsync_tree, start_writeback)
from page_cache_support import LINUX_ONLY, resident_pages, skip_on_tmpfs


def test_bytes_arrays_and_chunk_iterables_are_written_whole(tmp_path):
    atomic_write(tmp_path / "a.bin", b"bytes")
    atomic_write(tmp_path / "b.f32", np.arange(6, dtype=np.float32).reshape(2, 3))
    atomic_write(tmp_path / "c.bin", (bytes([i]) * 3 for i in range(4)))
    assert (tmp_path / "a.bin").read_bytes() == b"bytes"
    np.testing.assert_array_equal(np.fromfile(tmp_path / "b.f32", dtype=np.float32), np.arange(6, dtype=np.float32))
    assert (tmp_path / "c.bin").read_bytes() == b"\x00\x00\x00\x01\x01\x01\x02\x02\x02\x03\x03\x03"


@pytest.mark.slow
@pytest.mark.parametrize("extra", [0, 4, WRITEBACK_STEP - 4])
def test_a_write_of_several_writeback_steps_is_written_whole(tmp_path, extra):
    """A durable write larger than WRITEBACK_STEP goes out step by step, each step's writeback started as it goes."""
    data = np.random.default_rng(extra).integers(0, 255, 2 * WRITEBACK_STEP + extra, dtype=np.uint8)
    atomic_write(tmp_path / "v.bin", data)
    atomic_write(tmp_path / "w.bin", [data[:5].tobytes(), data[5:]])   # a chunk larger than a step after a small one
    assert (tmp_path / "v.bin").read_bytes() == data.tobytes() == (tmp_path / "w.bin").read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@LINUX_ONLY
def test_start_writeback_is_accepted_for_an_open_file_on_linux(tmp_path):
    with open(tmp_path / "f", "wb") as f:
        f.write(b"x" * 8192)
        f.flush()
        assert start_writeback(f.fileno())
        assert start_writeback(f.fileno(), 4096, 4096)
    assert not start_writeback(-1)   # a bad descriptor: refused, not raised


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "file.bin"
    atomic_write(target, b"old")

    def interrupted():
        yield b"new data, half"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, interrupted())
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["file.bin"]


def test_missing_parent_folders_are_created(tmp_path):
    atomic_write(tmp_path / "a" / "b" / "c.json", b"{}")
    assert (tmp_path / "a" / "b" / "c.json").read_bytes() == b"{}"


def test_concurrent_writers_of_one_folder_do_not_share_temp_files(tmp_path):
    payloads = {f"f{i}.bin": bytes([i]) * 100_000 for i in range(16)}
    threads = [threading.Thread(target=atomic_write, args=(tmp_path / name, data)) for name, data in payloads.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == payloads


def test_json_is_sorted_indented_and_newline_terminated(tmp_path):
    atomic_write_json(tmp_path / "m.json", {"b": 1, "a": [1, 2]})
    text = (tmp_path / "m.json").read_text()
    assert text.endswith("}\n") and json.loads(text) == {"a": [1, 2], "b": 1} and text.index('"a"') < text.index('"b"')


def test_fsync_helpers_accept_existing_paths(tmp_path):
    (tmp_path / "x").write_bytes(b"1")
    fsync_file(tmp_path / "x")
    fsync_dir(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_a_writer_killed_mid_write_leaves_the_old_file(tmp_path):
    target = tmp_path / "v.bin"
    atomic_write(target, b"old")
    ready = tmp_path / "ready"
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from fedort.common.durable import atomic_write\n"
        "def chunks():\n"
        "    yield b'x' * 1000\n"
        f"    Path({str(ready)!r}).write_text('1')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "    yield b'never'\n"
        f"atomic_write(Path({str(target)!r}), chunks())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert out.returncode == -9 and ready.exists()
    assert target.read_bytes() == b"old"  # only a stray dot-temp file may remain, never a torn target


def test_a_non_durable_write_still_replaces_the_file_whole_and_leaves_no_temp(tmp_path):
    target = tmp_path / "cache.bin"
    atomic_write(target, b"old")
    atomic_write(target, [b"new ", b"bytes"], durable=False)
    assert target.read_bytes() == b"new bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["cache.bin"]


def test_fsync_tree_counts_every_file_below_the_root_but_the_skipped_entries(tmp_path):
    for rel in ("metrics.csv", "data/a.npz", "state/state.db", "state/models/m.onnx", "cache/blob"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    assert fsync_tree(tmp_path) == 5
    assert fsync_tree(tmp_path, skip=("state", "cache")) == 2


@LINUX_ONLY
def test_drop_cached_frees_a_durable_files_page_cache_and_keeps_its_bytes(tmp_path):
    skip_on_tmpfs(tmp_path)
    data = np.arange(1 << 20, dtype="<f4")                 # 4 MiB
    path = tmp_path / "round-0002.f32"
    atomic_write(path, data)                               # fsynced: no dirty page is left
    assert path.read_bytes() == data.tobytes() and resident_pages(path) > 0
    drop_cached(path, tmp_path / "missing.f32")            # a missing file is skipped
    assert resident_pages(path) == 0
    assert path.read_bytes() == data.tobytes()


def test_a_write_killed_midway_leaves_a_temp_file_that_drop_partial_writes_removes(tmp_path):
    """A process SIGKILLed inside atomic_write leaves the old file whole and its temp file behind; the temp
    file (and only it) is removed by drop_partial_writes, as a restarting coordinator does in its model folders."""
    import subprocess
    import sys

    from fedort.common.durable import drop_partial_writes

    target = tmp_path / "model.json"
    target.write_bytes(b"old")
    (tmp_path / "model.onnx").write_bytes(b"keep")
    code = ("import os, signal, sys\n"
            "from fedort.common.durable import atomic_write\n"
            "def chunks():\n"
            "    yield b'new, half written'\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "atomic_write(sys.argv[1], chunks())\n")
    done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, timeout=60)
    assert done.returncode == -9, done.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".model.json."))
    assert len(left) == 1 and left[0].endswith(".tmp")
    assert [p.name for p in drop_partial_writes(tmp_path)] == left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", "model.onnx"]
    assert target.read_bytes() == b"old"
