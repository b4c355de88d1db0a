"""The end of a run, seen by real `fedort edge run` processes against a real `fedort coordinator serve`.

After the run ends the coordinator keeps answering (`done_grace_s`) until every device has been
told DONE and has asked whether the run succeeded, so each device exits at once with the right
code and no warning about an unreachable coordinator.
"""

from __future__ import annotations

import grpc
import pytest

from fedort.protos.stubs import fedort_v1_pb2 as pb, fedort_v1_pb2_grpc as pb_grpc
from test_edge_e2e import data, finish, procs, start_coordinator, start_edge  # noqa: F401 (fixtures)


@pytest.mark.slow
def test_devices_of_a_successful_run_exit_0_without_a_warning_and_the_coordinator_then_stops(
        procs, tmp_path, mlp_artifacts, data):
    coordinator_port = start_coordinator(procs, mlp_artifacts, tmp_path / "state", rounds=1, min_clients=2,
                                         round_timeout=60, done_grace=60)
    coordinator = procs.procs[0]
    edges = [start_edge(procs, coordinator_port, data[i], f"dev{i}") for i in range(2)]
    for p in edges:
        assert finish(p, 120) == 0, p.err_path.read_text()[-3000:]
        err = p.err_path.read_text()
        assert "WARNING" not in err and "could not ask" not in err, err
        assert "coordinator says the run is done" in err
    assert finish(coordinator, 30) == 0   # well before its 60 s grace: both devices had their answer


@pytest.mark.slow
def test_a_device_of_a_failed_run_exits_non_zero_saying_it_failed(procs, tmp_path, mlp_artifacts, data):
    # two selected, one silent: the single attempt of round 1 cannot get its two updates and fails
    port = start_coordinator(procs, mlp_artifacts, tmp_path / "state", rounds=1, min_clients=2, round_timeout=2,
                             max_round_attempts=1, done_grace=5)
    coordinator = procs.procs[0]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        pb_grpc.CoordinatorStub(channel).Join(pb.JoinRequest(client_id="silent"), timeout=10)
        edge = start_edge(procs, port, data[0], "dev0")
        assert finish(edge, 120) == 1
    assert "the run is over: it FAILED" in edge.err_path.read_text()
    assert finish(coordinator, 60) == 1   # the silent one never asks: the coordinator stops at its grace


@pytest.mark.slow
def test_a_device_that_arrives_after_the_end_exits_at_once_saying_the_run_is_over(
        procs, tmp_path, mlp_artifacts, data):
    port = start_coordinator(procs, mlp_artifacts, tmp_path / "state", rounds=1, min_clients=1, fraction=1.0,
                             round_timeout=2, done_grace=120)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        # a device that joined and went silent: the coordinator keeps answering for it during the grace
        pb_grpc.CoordinatorStub(channel).Join(pb.JoinRequest(client_id="silent"), timeout=10)
        first = start_edge(procs, port, data[0], "dev0")
        assert finish(first, 120) == 0, first.err_path.read_text()[-3000:]
        late = start_edge(procs, port, data[1], "late")
        assert finish(late, 60) == 0, late.err_path.read_text()[-3000:]
    out, err = late.out_path.read_text(), late.err_path.read_text()
    assert "coordinator says the run is done" in err and "fit:" not in out, out + err
