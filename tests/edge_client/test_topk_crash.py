"""Top-k error feedback survives a device crash around its upload (edge_client/uploads/feedback_journal.py).

A real `EdgeClient` process (topk:0.05, identity and residual in its cache folder) kills itself with
SIGKILL at one point of its first upload: right after the coordinator acknowledged it (before the
answer was recorded), or right before sending it. Before dying it writes down what the uninterrupted
run would have kept: r' (the upload counted) and c (it did not). The device then starts again in this
process with the same cache and data file; its join() sends the journaled update again and the
coordinator's answer settles the residual, which must be exactly r' or c.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fedort.edge_client import EdgeClient
from fedort.edge_client.client.cache import identity_key
from fedort.edge_client.uploads.update_codec import ResidualStore

from edge_support import config, db, digits, part, server  # noqa: F401 (fixtures)

CODEC = "topk:0.05"

DEVICE = r'''
"""A top-k device that SIGKILLs itself at fault point `point` of its first upload:
upload.before_send (nothing sent) or upload.after_reply (acknowledged, the answer never recorded)."""
import os, signal, sys
import numpy as np
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.common.faults import armed
from fedort.edge_client.transport.grpc_transport import Transport

address, data, cache, point, expected = sys.argv[1:6]
client = None


def die() -> None:
    u = client._pending.update   # what this run keeps: r' if the upload counts, c if not
    np.savez(expected, residual=u.residual, corrected=u.corrected, round=client._pending.round, point=point)
    os.kill(os.getpid(), signal.SIGKILL)


cfg = EdgeConfig(address, data=data, cache_dir=cache, name="doomed", poll_wait_ms=1000, insecure=True,
                 codec="''' + CODEC + r'''", topk_warmup="off")
client = EdgeClient(cfg)
with armed(point, die):
    client.run()
'''


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def doomed(tmp_path, digits):
    """run(address, when) -> (data file, cache folder, expected arrays) after the device process died."""
    data = tmp_path / "doomed.npz"
    np.savez(data, **part(digits, 0, 2, 200))
    script = tmp_path / "doomed.py"
    script.write_text(DEVICE)
    procs: list[subprocess.Popen] = []

    def run(address: str, when: str):
        point = {"before-send": "upload.before_send", "after-ack": "upload.after_reply"}[when]
        expected = tmp_path / "expected.npz"
        with open(tmp_path / "doomed.err", "wb") as err:
            p = subprocess.Popen([sys.executable, str(script), address, str(data), str(tmp_path / "cache-doomed"),
                                  point, str(expected)], stderr=err, cwd=tmp_path)
        procs.append(p)
        assert p.wait(120) == -signal.SIGKILL, (tmp_path / "doomed.err").read_text()[-3000:]
        kept = {k: v[()] for k, v in np.load(expected).items()}
        assert kept.pop("point") == point     # it died at that window, in its first upload
        return data, tmp_path / "cache-doomed", kept

    yield run
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def restarted(address: str, tmp_path: Path, data: Path) -> EdgeClient:
    client = EdgeClient(config(address, tmp_path, "doomed", data=data, codec=CODEC, topk_warmup="off"))
    client.join()   # sends the journaled update again; its answer settles the residual
    return client


def residual_on_disk(address: str, data: Path, cache: Path, client: EdgeClient) -> np.ndarray:
    key = f"{identity_key(address, 'doomed', os.path.abspath(data))}|{client.model_id}"
    return ResidualStore(cache / "residuals").load(key, client.manifest.parameter_count)


def rows_of(tmp_path: Path, client_id: str) -> list[tuple]:
    return db(tmp_path, "SELECT round FROM submissions WHERE client_id = ?", client_id)


@pytest.mark.slow
def test_killed_after_the_coordinator_acknowledged_the_restarted_device_keeps_r_prime(server, tmp_path, doomed):
    address = server.start_with(rounds=2, min_clients=1)
    data, cache, expected = doomed(address, "after-ack")
    rnd = int(expected["round"])
    wait_until(lambda: db(tmp_path, "SELECT 1 FROM rounds WHERE round = ?", rnd + 1), 30, f"round {rnd} to close")
    client = restarted(address, tmp_path, data)
    try:
        assert [(r.round, r.outcome) for r in client.reports] == [(rnd, "duplicate")]
        assert rows_of(tmp_path, client.client_id) == [(rnd,)]          # counted once
        np.testing.assert_array_equal(residual_on_disk(address, data, cache, client), expected["residual"])
    finally:
        client.close()


@pytest.mark.slow
def test_killed_before_sending_while_the_round_is_open_the_restarted_device_delivers_it(server, tmp_path, doomed):
    address = server.start_with(rounds=2, min_clients=1, round_timeout_s=60)
    data, cache, expected = doomed(address, "before-send")
    client = restarted(address, tmp_path, data)
    try:
        rnd = int(expected["round"])
        assert [(r.round, r.outcome) for r in client.reports] == [(rnd, "accepted")]
        assert rows_of(tmp_path, client.client_id) == [(rnd,)]
        np.testing.assert_array_equal(residual_on_disk(address, data, cache, client), expected["residual"])
    finally:
        client.close()


@pytest.mark.slow
def test_killed_before_the_coordinator_counted_it_the_restarted_device_keeps_c(server, tmp_path, digits, doomed):
    # a second device makes the round close at its deadline without the doomed device's update
    address = server.start_with(rounds=3, min_clients=1, min_available_clients=2, round_timeout_s=5)
    other = EdgeClient(config(address, tmp_path, "other"), data=part(digits, 1, 2, 200))
    thread = threading.Thread(target=other.run, daemon=True)
    thread.start()
    client = None
    try:
        data, cache, expected = doomed(address, "before-send")
        rnd = int(expected["round"])       # (1 unless the device was slower to start than the round's deadline)
        wait_until(lambda: db(tmp_path, "SELECT 1 FROM rounds WHERE round = ?", rnd + 1), 60, f"round {rnd} to close")
        client = restarted(address, tmp_path, data)
        assert [(r.round, r.outcome) for r in client.reports] == [(rnd, "stale")]
        assert rows_of(tmp_path, client.client_id) == []                 # it never counted
        np.testing.assert_array_equal(residual_on_disk(address, data, cache, client), expected["corrected"])
    finally:
        other.stop()
        thread.join(30)
        if client is not None:
            client.close()
