"""edge_client.client: what an EdgeClient refuses before it can work (bad data, wrong model, shared identity)
and how its configuration is read; against a real in-process Coordinator on 127.0.0.1:0."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edge_support import (  # noqa: F401 (fixtures)
    FAST, config, db, digits, part, server,
)
from fedort.common.errors import DataError, WrongModelError
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.ort.artifacts import build_artifacts
from fedort.edge_client.client.cache import ArtifactCache
from fedort.ort.models import cnn, mlp
from fedort.edge_client.transport.retry import Backoff
from fedort.ort.session import TrainingSession


# ---- refusing what cannot work --------------------------------------------------------------------

def test_data_that_cannot_be_used_is_refused_before_joining(server, tmp_path, digits):
    address = server.start_with()
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=digits["x"][:10], labels=digits["labels"][:9])
    client = EdgeClient(config(address, tmp_path, "bad", data=bad))
    with pytest.raises(DataError, match="same number of rows"):
        client.join()
    client.close()
    assert db(tmp_path, "SELECT * FROM clients") == []


def test_data_of_the_wrong_dtype_is_refused_and_the_client_leaves(server, tmp_path, digits):
    address = server.start_with()
    data = {"x": digits["x"][:50].astype(np.float64), "labels": digits["labels"][:50]}
    client = EdgeClient(config(address, tmp_path, "bad"), data=data)
    with pytest.raises(DataError, match=r"'x' must be float32\[\?, 64\], got float64\[50, 64\]"):
        client.join()
    client.close()
    ((active, reason),) = db(tmp_path, "SELECT active, left_reason FROM clients")
    assert active == 0 and "does not fit" in reason


@pytest.mark.slow
def test_a_known_manifest_refuses_bad_data_before_joining_again(server, tmp_path, digits):
    address = server.start_with()
    cache = tmp_path / "cache"
    good = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data=part(digits, 0, 4))
    good.join()
    good.close()
    seen = db(tmp_path, "SELECT last_seen_ms FROM clients")
    bad = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data={"x": digits["x"][:20]})
    with pytest.raises(DataError, match=r"lacks array\(s\) \['labels'\]"):
        bad.join()
    bad.close()
    assert db(tmp_path, "SELECT last_seen_ms FROM clients") == seen  # nothing was sent


def test_a_session_of_another_model_is_refused(server, tmp_path, digits):
    address = server.start_with()
    other = tmp_path / "cnn"
    build_artifacts(cnn(), other)
    client = EdgeClient(config(address, tmp_path, "dev"), session=TrainingSession.from_artifacts(other),
                        data=part(digits, 0, 4))
    with pytest.raises(WrongModelError, match="model"):
        client.join()
    client.close()


# ---- configuration --------------------------------------------------------------------------------

def test_config_file_settings_are_overridden_by_flags(tmp_path):
    (tmp_path / "edge.toml").write_text(
        '[edge]\ncoordinator = "10.0.0.5:7420"\ndata = "client.npz"\nname = "phone"\npoll_wait_ms = 5000\n'
        '[edge.backoff]\ninitial_s = 0.5\nmax_delay_s = 4.0\n')
    cfg = EdgeConfig.load(tmp_path / "edge.toml", name="tablet", client_id=None)
    assert cfg.coordinator == "10.0.0.5:7420" and cfg.name == "tablet" and cfg.poll_wait_ms == 5000
    assert Path(cfg.data) == tmp_path / "client.npz"          # relative to the file
    assert cfg.backoff == Backoff(initial_s=0.5, max_delay_s=4.0)


def test_unknown_config_keys_are_refused(tmp_path):
    from fedort.common.errors import ConfigError

    (tmp_path / "edge.toml").write_text('coordinator = "127.0.0.1:1"\npoll_wait = 5\n')
    with pytest.raises(ConfigError, match=r"unknown edge setting\(s\) 'poll_wait' \(did you mean 'poll_wait_ms'\?\)"):
        EdgeConfig.load(tmp_path / "edge.toml")
    with pytest.raises(ConfigError, match="HOST:PORT"):
        EdgeConfig("no-port").channel_config()


def test_a_shared_session_refuses_bad_data_before_joining(server, tmp_path, mlp_artifacts, digits):
    address = server.start_with()
    client = EdgeClient(EdgeConfig(address, insecure=True, client_id="client-0001", persist_identity=False),
                        session=TrainingSession.from_artifacts(mlp_artifacts), cache=ArtifactCache(tmp_path / "c"),
                        data={"x": digits["x"][:20]})
    with pytest.raises(DataError, match=r"lacks array\(s\) \['labels'\]"):
        client.join()
    client.close()
    assert db(tmp_path, "SELECT * FROM clients") == []


@pytest.mark.slow
def test_a_coordinator_that_lost_its_state_gets_the_same_client_back(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=1)
    port = int(address.rsplit(":", 1)[1])
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 4, 100))
    cid = client.join().client_id
    server.stop()
    server.start_with(rounds=1, min_clients=1, address=f"127.0.0.1:{port}", state_dir=tmp_path / "state-new")
    summary = client.run()                      # poll -> NOT_FOUND "unknown client" -> re-Join as cid
    assert summary.outcome == "done" and summary.rounds_trained == [1] and summary.client_id == cid


@pytest.mark.slow
def test_a_coordinator_that_now_runs_another_model_ends_the_client(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=2)
    port = int(address.rsplit(":", 1)[1])
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 4, 100))
    client.join()
    server.stop()
    other = tmp_path / "mlp-sgd"
    build_artifacts(mlp(), other, optimizer="sgd")
    server.start_with(artifacts=other, address=f"127.0.0.1:{port}", state_dir=tmp_path / "state-other")
    with pytest.raises(WrongModelError, match="now runs model .* restart the client"):
        client.run()


@pytest.mark.slow
def test_stop_during_local_training_ends_the_fit_after_the_current_batch(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=1, local_epochs=5000)   # minutes of training
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 2))
    result: list = []
    thread = threading.Thread(target=lambda: result.append(client.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while client.phase != "training" and time.monotonic() < deadline:
        time.sleep(0.01)
    client.stop("app closing")
    thread.join(20)                       # minutes of training left: it ended after the current batch
    assert not thread.is_alive() and result and result[0].outcome == "stopped"
    assert db(tmp_path, "SELECT * FROM submissions") == []
    assert db(tmp_path, "SELECT active, left_reason FROM clients") == [(0, "app closing")]


@pytest.mark.slow
def test_two_running_clients_cannot_share_one_saved_identity(server, tmp_path, digits):
    from fedort.common.errors import ConfigError

    address = server.start_with()
    cache = tmp_path / "cache"
    first = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data=part(digits, 0, 4))
    first.join()
    twin = EdgeClient(config(address, tmp_path, "dev", cache_dir=cache), data=part(digits, 1, 4))
    with pytest.raises(ConfigError, match="same identity .* own --name or --cache-dir"):
        twin.join()
    first.close()
    assert twin.join().client_id == first.client_id      # free again once the first one is gone
    twin.close()


@pytest.mark.slow
def test_clients_on_one_machine_with_their_own_data_files_get_their_own_identities(server, tmp_path, digits):
    address = server.start_with()
    files = []
    for i in range(2):
        files.append(tmp_path / f"client-{i}.npz")
        np.savez(files[-1], **part(digits, i, 4))
    shared = dict(cache_dir=tmp_path / "cache")        # same host name, same cache folder
    a = EdgeClient(EdgeConfig(address, insecure=True, data=files[0], backoff=FAST, **shared))
    b = EdgeClient(EdgeConfig(address, insecure=True, data=files[1], backoff=FAST, **shared))
    assert a.join().client_id != b.join().client_id
    for c in (a, b):
        c.close()
