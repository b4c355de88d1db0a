"""`fedort coordinator serve|status` as a user runs them: real subprocesses, flags over TOML, signals."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from fedort.cli.coordinator import config_from_args, register
from coordinator_fixtures import chunks_of, mlp_artifacts, update_header  # noqa: F401
from fedort.ort.artifacts import build_artifacts
from fedort.ort.models import cnn
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.common.errors import ConfigError


def fedort(*args: str) -> list[str]:
    exe = Path(sys.executable).with_name("fedort")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "fedort", *args]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["coordinator", *argv])


@pytest.fixture
def processes():
    procs: list[subprocess.Popen] = []

    def spawn(*args: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen(fedort(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=10)


def wait_port(port_file: Path, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 20
    while not port_file.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return int(port_file.read_text())


def test_flags_override_the_toml_file(tmp_path):
    toml = tmp_path / "coordinator.toml"
    toml.write_text('[coordinator]\nartifacts = "arts"\nstate_dir = "state"\nrounds = 7\nmin_clients = 3\nlr = 0.1\n')
    config = config_from_args(parse("serve", "--config", str(toml), "--rounds", "2", "--fraction", "0.5"))
    assert config.plan.rounds == 2 and config.plan.fraction == 0.5          # flags win
    assert config.plan.min_clients == 3 and config.training.lr == 0.1           # the file fills the rest
    assert config.plan.min_available_clients == 3                      # defaults to min_clients
    assert config.artifacts == tmp_path / "arts"                  # relative to the file


def test_bad_values_are_config_errors_naming_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="fraction must be in \\(0, 1\\], got 1.5"):
        config_from_args(parse("serve", "--artifacts", "a", "--state-dir", "s", "--fraction", "1.5"))
    with pytest.raises(ConfigError, match="needs artifacts"):
        config_from_args(parse("serve", "--state-dir", "s"))
    toml = tmp_path / "c.toml"
    toml.write_text("artifacts = 'a'\nstate_dir = 's'\nroundz = 3\n")
    with pytest.raises(ConfigError, match="unknown coordinator setting"):
        config_from_args(parse("serve", "--config", str(toml)))


def test_export_external_bytes_flag_sets_the_threshold_and_a_negative_one_is_refused():
    args = ("serve", "--artifacts", "a", "--state-dir", "s", "--export-external-bytes")
    assert config_from_args(parse(*args, "0")).export.export_external_bytes == 0
    assert config_from_args(parse(*args[:-1])).export.export_external_bytes == 1 << 20    # the default
    with pytest.raises(ConfigError, match="export_external_bytes must be an integer >= 0 .*, got -1"):
        config_from_args(parse(*args, "-1"))


@pytest.mark.slow
def test_serve_runs_a_round_then_sigterm_stops_gracefully_and_status_prints_it(processes, mlp_artifacts, tmp_path):
    state, port_file = tmp_path / "state", tmp_path / "port"
    serve = ["coordinator", "serve", "--artifacts", str(mlp_artifacts), "--state-dir", str(state), "--address",
             "127.0.0.1:0", "--port-file", str(port_file), "--rounds", "3", "--min-clients", "2", "--round-timeout-s", "20",
             "--insecure", "--auth", "open"]
    proc = processes(*serve)
    port = wait_port(port_file, proc)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        model = [stub.Join(pb.JoinRequest(client_id=c), timeout=10) for c in ("client-a", "client-b")][0].model_id
        for cid in ("client-a", "client-b"):
            task = stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=5000), timeout=10)
            parts = list(stub.DownloadVector(pb.VectorRequest(client_id=cid, model_id=model, round=1), timeout=10))
            vector = np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")
            update = [pb.UpdatePart(header=update_header(cid, model, task.round, vector, 10,
                                                         trained_from=task.vector_sha256))]
            assert stub.SubmitUpdate(iter(update + [pb.UpdatePart(chunk=c) for c in chunks_of(vector)]),
                                     timeout=10).accepted
        # until round 1's row is EXPORTED (its model.json is written before that row is, so the file's existence
        # does not mean `status` will print EXPORTED yet)
        deadline = time.monotonic() + 60
        while ("EXPORTED" not in [r.state for r in stub.Status(pb.StatusRequest(), timeout=10).rounds if r.round == 1]):
            assert time.monotonic() < deadline, "round 1 was not exported within 60 s"
            time.sleep(0.05)
        live = subprocess.run(fedort("coordinator", "status", "--state-dir", str(state)), capture_output=True,
                              text=True, timeout=30)
    assert live.returncode == 0, live.stderr
    assert "EXPORTED" in live.stdout and "2 registered" in live.stdout
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "round 1: TRAINING -> AGGREGATING" in err and "stop requested" in err
    after = subprocess.run(fedort("coordinator", "status", "--state-dir", str(state)), capture_output=True, text=True,
                           timeout=30)
    assert after.returncode == 0
    lines = after.stdout.splitlines()
    assert any(line.split()[:2] == ["1", "EXPORTED"] for line in lines), after.stdout
    assert "round-0001/model.onnx" in after.stdout


@pytest.mark.slow
def test_a_state_dir_of_another_model_is_refused_clearly(processes, mlp_artifacts, tmp_path):
    state, port_file = tmp_path / "state", tmp_path / "port"
    proc = processes("coordinator", "serve", "--artifacts", str(mlp_artifacts), "--state-dir", str(state),
                     "--address", "127.0.0.1:0", "--port-file", str(port_file), "--insecure", "--auth", "open")
    wait_port(port_file, proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    other = tmp_path / "cnn"
    build_artifacts(cnn(), other)
    second = processes("coordinator", "serve", "--artifacts", str(other), "--state-dir", str(state), "--address",
                       "127.0.0.1:0", "--insecure")
    _, err = second.communicate(timeout=30)
    assert second.returncode == 1
    assert "belongs to model" in err and "use a new --state-dir" in err


@pytest.mark.slow
def test_a_failed_run_exits_1_with_the_reason(processes, mlp_artifacts, tmp_path):
    proc = processes("coordinator", "serve", "--artifacts", str(mlp_artifacts), "--state-dir", str(tmp_path / "s"),
                     "--address", "127.0.0.1:0", "--port-file", str(tmp_path / "port"), "--min-clients", "1",
                     "--round-timeout-s", "0.2", "--max-round-attempts", "2", "--insecure", "--auth", "open")
    port = wait_port(tmp_path / "port", proc)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        model = stub.Join(pb.JoinRequest(client_id="client-a"), timeout=10).model_id
        deadline = time.monotonic() + 10   # the client is selected but never trains
        while stub.PollTask(pb.PollRequest(client_id="client-a", model_id=model, wait_ms=1000),
                            timeout=10).kind != pb.Task.DONE:   # a failed run tells its clients it is over
            assert time.monotonic() < deadline
            time.sleep(0.1)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "round 1 failed: 0 of the required 1 clients reported after 2 attempt(s)" in err


@pytest.mark.slow
def test_status_of_a_missing_state_dir_is_a_clear_error(tmp_path):
    result = subprocess.run(fedort("coordinator", "status", "--state-dir", str(tmp_path / "nope")),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "no coordinator state" in result.stderr
