"""Helpers for tests that run the TypeScript client (edge_client/web): where node and its build are."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parent.parent / "edge_client" / "web"
CHROMIUM = Path("/usr/bin/chromium")


def node_or_skip() -> str:
    """The node executable, or skip the test (the TypeScript client needs Node 20+)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed; the TypeScript client's tests need Node 20+")
    return node


def chromium_or_skip() -> Path:
    if not CHROMIUM.is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    return CHROMIUM


def web_build() -> Path:
    """edge_client/web/dist, built with `npm run build` if it is not there (needs `npm ci` done once)."""
    dist = WEB / "dist"
    if not (dist / "node-device.js").is_file():
        if not (WEB / "node_modules").is_dir():
            pytest.fail("edge_client/web/node_modules is missing: run `npm ci` in edge_client/web")
        subprocess.run(["npm", "run", "build"], cwd=WEB, check=True, capture_output=True, timeout=300)
    return dist
