"""TLS and mutual TLS between edge clients and the coordinator, with a throwaway CA (tls_fixtures).

Real coordinators on 127.0.0.1:0; real EdgeClients training a real round over TLS with device tokens.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedort.coordinator.rpc.devices import DeviceStore
from coordinator_fixtures import mlp_artifacts, start_coordinator  # noqa: F401
from fedort.edge_client.client.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.transport.retry import Backoff
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.common.errors import CertificateError, ConfigError, UnavailableError
from tls_fixtures import pki  # noqa: F401

FAST = Backoff(initial_s=0.05, max_delay_s=0.2, give_up_after_s=5.0)


def digits_part(i: int, n: int, rows: int = 60) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return {"x": (d.data[i::n][:rows] / 16).astype(np.float32), "labels": d.target[i::n][:rows].astype(np.int64)}


def tls(pki, mutual: bool = False) -> dict:  # noqa: F811
    return dict(insecure=False, tls_cert=pki.server_cert, tls_key=pki.server_key,
                tls_client_ca=pki.ca if mutual else None)


@pytest.mark.slow
async def test_a_real_round_runs_over_tls_with_device_tokens(tmp_path, pki, start_coordinator):  # noqa: F811
    state = tmp_path / "state"
    store = DeviceStore(state)
    tokens = [store.enroll(f"client-{i:04d}")[1] for i in range(2)]
    coordinator = await start_coordinator(rounds=1, auth="token", state_dir=state, **tls(pki))
    address = f"127.0.0.1:{coordinator.port}"

    def run(i: int):
        config = EdgeConfig(address, ca_file=pki.ca, token=tokens[i], name=f"dev{i}", cache_dir=tmp_path / f"c{i}",
                            poll_wait_ms=2000, heartbeats=False, backoff=FAST)
        assert config.client_id == f"client-{i:04d}"     # taken from the token
        return EdgeClient(config, data=digits_part(i, 2)).run()

    summaries = await asyncio.wait_for(asyncio.gather(*(asyncio.to_thread(run, i) for i in range(2))), 120)
    assert sorted(s.client_id for s in summaries) == ["client-0000", "client-0001"]
    assert all(s.rounds_trained == [1] for s in summaries), summaries
    outcome = await asyncio.wait_for(coordinator.wait_done(), 60)
    assert outcome.state.name == "DONE" and outcome.rounds_completed == 1


async def test_a_client_trusting_another_ca_fails_with_unavailable_and_says_why(pki, start_coordinator):  # noqa: F811
    coordinator = await start_coordinator(**tls(pki))
    with Transport(ChannelConfig(f"127.0.0.1:{coordinator.port}", ca_file=pki.other_ca, rpc_timeout_s=3)) as t:
        with pytest.raises(UnavailableError) as e:
            await asyncio.to_thread(t.join, "dev")
    message = str(e.value)
    assert isinstance(e.value, CertificateError)      # an UnavailableError that is never retried
    assert message.startswith("UNAVAILABLE") and "failed verification" in message and "--ca-file" in message


async def test_a_plaintext_client_cannot_talk_to_a_tls_coordinator_and_is_told_it_probably_serves_tls(
        pki, start_coordinator):  # noqa: F811
    coordinator = await start_coordinator(**tls(pki))
    with Transport(ChannelConfig(f"127.0.0.1:{coordinator.port}", insecure=True, rpc_timeout_s=3)) as t:
        with pytest.raises(UnavailableError, match=r"probably serves TLS; drop --insecure and pass --ca-file"):
            await asyncio.to_thread(t.join, "dev")


def test_a_key_of_another_certificate_is_refused_naming_both_files(pki, mlp_artifacts, tmp_path):  # noqa: F811
    done = subprocess.run([sys.executable, "-m", "fedort", "coordinator", "serve", "--artifacts", str(mlp_artifacts),
                           "--state-dir", str(tmp_path / "s"), "--address", "127.0.0.1:0", "--tls-cert",
                           str(pki.server_cert), "--tls-key", str(pki.client_key)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"--tls-key {pki.client_key} is not the private key of --tls-cert {pki.server_cert}" in done.stderr
    assert "cannot listen" not in done.stderr and "E0000" not in done.stderr and "Traceback" not in done.stderr


def test_a_file_that_is_no_pem_key_is_refused_as_such(pki, mlp_artifacts, tmp_path):  # noqa: F811
    garbage = tmp_path / "server.key"
    garbage.write_text("not a key\n")
    done = subprocess.run([sys.executable, "-m", "fedort", "coordinator", "serve", "--artifacts", str(mlp_artifacts),
                           "--state-dir", str(tmp_path / "s"), "--address", "127.0.0.1:0", "--tls-cert",
                           str(pki.server_cert), "--tls-key", str(garbage)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and f"--tls-key {garbage} is not an unencrypted PEM private key" in done.stderr


@pytest.mark.slow
async def test_mutual_tls_refuses_a_client_without_a_certificate_and_accepts_one_with(pki, start_coordinator):  # noqa: F811
    coordinator = await start_coordinator(**tls(pki, mutual=True))
    address = f"127.0.0.1:{coordinator.port}"
    with Transport(ChannelConfig(address, ca_file=pki.ca, rpc_timeout_s=3)) as t:
        with pytest.raises(UnavailableError) as e:
            await asyncio.to_thread(t.join, "no-cert")
    assert "client certificate (mutual TLS: --cert-file/--key-file)" in str(e.value)
    with Transport(ChannelConfig(address, ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key,
                                 rpc_timeout_s=5)) as t:
        info = await asyncio.to_thread(t.join, "with-cert", "client-0001")
    assert info.client_id == "client-0001"


async def test_the_python_api_needs_tls_or_an_explicit_insecure(start_coordinator):  # noqa: F811
    with pytest.raises(ConfigError, match="--tls-cert FILE --tls-key FILE.*or --insecure"):
        await start_coordinator(insecure=False)
    with pytest.raises(ConfigError, match="cert_file and key_file"):
        ChannelConfig("127.0.0.1:1", cert_file=__file__)


@pytest.mark.slow
def test_serve_without_tls_or_insecure_exits_1_saying_what_to_pass(mlp_artifacts, tmp_path):  # noqa: F811
    out = subprocess.run([sys.executable, "-m", "fedort", "coordinator", "serve", "--artifacts",
                          str(mlp_artifacts), "--state-dir", str(tmp_path / "s"), "--address", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "--tls-cert FILE --tls-key FILE" in out.stderr and "--insecure" in out.stderr
    assert not (tmp_path / "s").exists()     # refused before touching the state dir
