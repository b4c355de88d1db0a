"""What the page cache holds of a file (Linux): for the tests of code that frees or reuses it."""

from __future__ import annotations

import os

import pytest

LINUX_ONLY = pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not os.path.exists("/proc/mounts"),
                                reason="needs Linux: posix_fadvise, mincore and /proc/mounts")


def resident_pages(path) -> int:
    """How many of the file's pages are in the page cache (mincore over a private mapping of it)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        pages = -(-size // mmap.PAGESIZE)
        vec = (ctypes.c_ubyte * pages)()
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
            pytest.skip(f"mincore failed: errno {ctypes.get_errno()}")
        return sum(v & 1 for v in vec)
    finally:
        mm.close()


def skip_on_tmpfs(path) -> None:
    """Skip the test where `path` is on tmpfs, whose page cache is the file itself."""
    mounts = [line.split() for line in open("/proc/mounts")]
    best = max((m for m in mounts if str(path).startswith(m[1])), key=lambda m: len(m[1]))
    if best[2] in ("tmpfs", "ramfs"):
        pytest.skip(f"{path} is on tmpfs, whose page cache is the file itself")
