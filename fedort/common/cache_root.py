"""Where fedort keeps its caches on this machine: one answer for the device cache and the simulation caches.

`$FEDORT_CACHE_DIR` when set (tests point it at a temporary folder), else the platform's user cache
folder + fedort: `%LOCALAPPDATA%\\fedort\\Cache` on Windows, `~/Library/Caches/fedort` on macOS,
`$XDG_CACHE_HOME/fedort` (default `~/.cache/fedort`) elsewhere. It imports only the standard library,
so both sides use it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "FEDORT_CACHE_DIR"


def cache_root() -> Path:
    """The root of fedort's caches, read from the environment at each call (see the module docstring)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / "fedort" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "fedort"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedort"


__all__ = ["ENV", "cache_root"]
