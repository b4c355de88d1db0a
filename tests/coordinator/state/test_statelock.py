"""One coordinator per state dir and per port: real `fedort coordinator serve` subprocesses."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator_fixtures import mlp_artifacts  # noqa: F401
from fedort.coordinator.state.lock import StateDirLock
from fedort.common.errors import ConfigError


def fedort(*args: str) -> list[str]:
    exe = Path(sys.executable).with_name("fedort")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "fedort", *args]


@pytest.fixture
def serve(mlp_artifacts):
    procs: list[subprocess.Popen] = []

    def spawn(state_dir: Path, address: str = "127.0.0.1:0", port_file: Path | None = None) -> subprocess.Popen:
        args = ["coordinator", "serve", "--artifacts", str(mlp_artifacts), "--state-dir", str(state_dir),
                "--address", address, "--insecure", "--auth", "open", "--rounds", "1"]
        if port_file is not None:
            args += ["--port-file", str(port_file)]
        p = subprocess.Popen(fedort(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.terminate()
        try:
            p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate(timeout=10)


def wait_port(port_file: Path, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 60
    while not port_file.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "coordinator did not start serving within 60 s"
        time.sleep(0.05)
    return int(port_file.read_text())


@pytest.mark.slow
def test_a_second_serve_on_the_same_state_dir_is_refused_naming_the_holder(serve, tmp_path):
    first = serve(tmp_path / "state", port_file=tmp_path / "port1")
    wait_port(tmp_path / "port1", first)
    second = serve(tmp_path / "state")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 1
    assert "is in use by another coordinator" in err and f"pid {first.pid}" in err, err
    assert first.poll() is None          # the first one keeps serving


@pytest.mark.slow
def test_a_second_serve_on_a_busy_port_says_address_in_use(serve, tmp_path):
    first = serve(tmp_path / "a", port_file=tmp_path / "port1")
    port = wait_port(tmp_path / "port1", first)
    second = serve(tmp_path / "b", address=f"127.0.0.1:{port}")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: address in use" in err, err


@pytest.mark.slow
def test_the_lock_is_released_when_the_holder_dies(serve, tmp_path):
    first = serve(tmp_path / "state", port_file=tmp_path / "port1")
    wait_port(tmp_path / "port1", first)
    first.kill()
    first.communicate(timeout=20)
    with StateDirLock(tmp_path / "state") as lock:   # the kernel dropped the dead holder's flock
        assert lock.held


def test_the_lock_refuses_a_second_holder_in_process(tmp_path):
    with StateDirLock(tmp_path):
        with pytest.raises(ConfigError, match=r"in use by another coordinator \(pid \d+"):
            StateDirLock(tmp_path).acquire()
    with StateDirLock(tmp_path) as again:
        assert again.held
