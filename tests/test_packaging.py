"""Packaging: the wheel installs one top-level name, `fedort`, whose public API all resolves."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import fedort

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "fedort", "protos", "coordinator", "edge_client", "simulations")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from a clean copy of the sources (no stale build/ folder can leak into it)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = out.glob("fedort-*.whl")
    with zipfile.ZipFile(path) as z:
        yield z


@pytest.mark.slow
def test_the_wheels_only_top_level_name_is_fedort(wheel):
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"fedort"} and len(dist_info) == 1, sorted(tops)
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")] or [None]
    if top_level is not None:
        assert wheel.read(top_level).decode().split() == ["fedort"]


@pytest.mark.slow
def test_the_wheel_carries_every_part_under_fedort(wheel):
    names = set(wheel.namelist())
    for module in ("fedort/__init__.py", "fedort/cli/__init__.py", "fedort/common/durable.py", "fedort/common/errors.py",
                   "fedort/protos/fedort_v1.proto", "fedort/coordinator/server.py",
                   "fedort/common/client_data.py", "fedort/protos/stubs/fedort_v1_pb2.py", "fedort/edge_client/client/edge_client.py", "fedort/simulations/runner.py",
                   "fedort/simulations/scenarios/digits_iid.toml"):
        assert module in names, module


@pytest.mark.slow
def test_the_wheel_carries_every_package_folder_of_the_sources(wheel):
    """A folder added to the sources but not to pyproject's package list would import in an editable
    install and be missing from the wheel."""
    names = set(wheel.namelist())
    under = {"fedort": "fedort", "protos": "fedort/protos", "coordinator": "fedort/coordinator",
             "edge_client": "fedort/edge_client", "simulations": "fedort/simulations"}
    missing = [
        f"{source}/{init.parent.relative_to(ROOT / source)}"
        for source, target in under.items()
        for init in (ROOT / source).rglob("__init__.py")
        if "node_modules" not in init.parts
        and f"{target}/{init.relative_to(ROOT / source).as_posix()}".replace("/./", "/") not in names
    ]
    assert missing == []


def test_import_fedort_prints_the_version():
    out = subprocess.run([sys.executable, "-c", "import fedort; print(fedort.__version__)"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == fedort.__version__ and fedort.__version__ != "0+unknown"


def test_every_name_in_fedort_all_resolves():
    missing = [name for name in fedort.__all__ if getattr(fedort, name, None) is None]
    assert missing == []
