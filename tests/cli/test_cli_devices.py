"""`fedort coordinator enroll|revoke|devices` as an operator runs them (real subprocesses)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from fedort.coordinator.rpc.devices import DeviceStore
from coordinator_fixtures import mlp_artifacts  # noqa: F401
from tls_fixtures import issue_client, pki  # noqa: F401


def fedort(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedort", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.slow
def test_enroll_prints_the_token_once_devices_lists_without_it_and_revoke_withdraws_it(tmp_path):
    state = str(tmp_path / "state")
    out = fedort("coordinator", "enroll", "kitchen-sensor", "--state-dir", state)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("fedort_kitchen-sensor_") and len(token.splitlines()) == 1
    assert "shown only once" in out.stderr
    assert DeviceStore(state).verify(token) == "kitchen-sensor"

    again = fedort("coordinator", "enroll", "kitchen-sensor", "--state-dir", state)
    assert again.returncode == 1 and "already enrolled" in again.stderr

    listed = fedort("coordinator", "devices", "--state-dir", state)
    assert listed.returncode == 0 and "kitchen-sensor" in listed.stdout and "active" in listed.stdout
    assert token.rsplit("_", 1)[1] not in listed.stdout

    revoked = fedort("coordinator", "revoke", "kitchen-sensor", "--state-dir", state)
    assert revoked.returncode == 0 and "revoked kitchen-sensor" in revoked.stdout
    assert "revoked 20" in fedort("coordinator", "devices", "--state-dir", state).stdout

    missing = fedort("coordinator", "revoke", "nobody", "--state-dir", state)
    assert missing.returncode == 1 and "no active device" in missing.stderr


@pytest.mark.slow
def test_a_name_that_is_not_a_client_id_gets_a_generated_id(tmp_path):
    out = fedort("coordinator", "enroll", "Anna's phone", "--state-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("fedort_c-")
    assert "enrolled Anna's phone as client c-" in out.stderr


@pytest.mark.slow
def test_serve_over_mutual_tls_with_an_enrolled_edge_client_end_to_end(tmp_path, mlp_artifacts, pki):  # noqa: F811
    """The operator's path: enroll, serve with TLS + client CA, `fedort edge run --ca-file --cert-file --key-file --token-file`
    with the device's own certificate (its subject CN is the enrolled client id)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    np.savez(tmp_path / "client.npz", x=(d.data[:80] / 16).astype(np.float32), labels=d.target[:80].astype(np.int64))
    state = tmp_path / "state"
    token = fedort("coordinator", "enroll", "edge-1", "--state-dir", str(state)).stdout.strip()
    (tmp_path / "token").write_text(token + "\n")
    cert, key = issue_client(pki, tmp_path / "certs", "edge-1")
    port_file = tmp_path / "port"
    serve = subprocess.Popen(
        [sys.executable, "-m", "fedort", "coordinator", "serve", "--artifacts", str(mlp_artifacts),
         "--state-dir", str(state), "--address", "127.0.0.1:0", "--port-file", str(port_file), "--rounds", "1",
         "--min-clients", "1", "--round-timeout-s", "20", "--tls-cert", str(pki.server_cert), "--tls-key",
         str(pki.server_key), "--tls-client-ca", str(pki.ca)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read() if serve.poll() else "no port"
            time.sleep(0.05)
        address = f"127.0.0.1:{port_file.read_text().strip()}"
        edge = [sys.executable, "-m", "fedort", "edge", "run", "--coordinator", address, "--data",
                str(tmp_path / "client.npz"), "--cache-dir", str(tmp_path / "cache"), "--ca-file", str(pki.ca),
                "--cert-file", str(cert), "--key-file", str(key), "--give-up-after-s", "5"]
        refused = subprocess.run(edge, capture_output=True, text=True, timeout=30)     # no token
        assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr and "device token" in refused.stderr
        done = subprocess.run([*edge, "--token-file", str(tmp_path / "token")], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert "joined" in done.stdout and "as edge-1" in done.stdout and "1 round(s) trained as edge-1" in done.stdout
        assert serve.wait(30) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
        serve.communicate(timeout=10)


@pytest.mark.slow
def test_enroll_out_writes_the_token_to_a_file_only_its_owner_can_read(tmp_path):
    import os
    import stat

    state, token_file = str(tmp_path / "state"), tmp_path / "client.token"
    old = os.umask(0o022)   # the usual umask: a plain redirect would make the file world-readable
    try:
        out = fedort("coordinator", "enroll", "dev-1", "--state-dir", state, "--out", str(token_file))
    finally:
        os.umask(old)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and "client.token (mode 0600)" in out.stderr
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert DeviceStore(state).verify(token_file.read_text().strip()) == "dev-1"
    again = fedort("coordinator", "enroll", "dev-2", "--state-dir", state, "--out", str(token_file))
    assert again.returncode == 1 and "never overwritten" in again.stderr
    assert [d.client_id for d in DeviceStore(state).devices()] == ["dev-1"]     # refused before enrolling
