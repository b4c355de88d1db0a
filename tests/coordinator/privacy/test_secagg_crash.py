"""A real `fedort coordinator serve --secagg` SIGKILLed in each protocol phase, restarted on the same
state dir: the round resumes from its last durable phase and commits exactly the FedAvg of the
quantized updates — nothing a client sent is lost or counted twice. And under --secagg neither the
spool nor the state dir ever holds an individual update in the clear."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from chaos_support import CoordinatorProcess
from coordinator_fixtures import P_MLP, mlp_artifacts  # noqa: F401
from fedort.edge_client.secagg.client import SecAggClient
from fedort.edge_client.secagg.flow import masked_header
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.vector_stream import CHUNK_BYTES
from fedort.common.secagg.messages import Roster, ShareDelivery, UnmaskRequest
from fedort.common.secagg.pack import pack, unpack
from fedort.common.secagg.task import SecAggTask
from secagg_devices import deltas_for

IDS = ("dev-0", "dev-1", "dev-2", "dev-3")
PHASES = ("advertise", "share", "masked", "unmask")
TIMEOUT = 30


class Device:
    """One device's protocol state, kept across coordinator restarts (it is the coordinator that dies)."""

    def __init__(self, cid: str, delta: np.ndarray) -> None:
        self.cid, self.delta = cid, delta
        self.roster = self.delivery = self.masked = None

    def fit(self, stub, model: str) -> None:
        while (task := stub.PollTask(pb.PollRequest(client_id=self.cid, model_id=model, wait_ms=2000),
                                     timeout=TIMEOUT)).kind != pb.Task.FIT:
            pass
        self.round, self.model = task.round, model
        self.trained_from = task.vector_sha256     # the global this device trained from (admission requires it)
        self.spec = SecAggTask.from_bytes(task.secagg)
        self.client = SecAggClient(self.cid, self.spec.params)
        self.keys = self.client.advertise()

    def _step(self, stub, step: int, payload: bytes, wait_ms: int) -> bytes | None:
        reply = stub.SecAgg(pb.SecAggRequest(client_id=self.cid, model_id=self.model, round=self.round, step=step,
                                             payload=payload, wait_ms=wait_ms), timeout=TIMEOUT)
        return reply.payload if reply.ready else None

    def send(self, stub, phase: str, wait_ms: int) -> None:
        """This phase's message (the same one again after a restart), waiting up to wait_ms for the next input."""
        if phase == "advertise":
            if (r := self._step(stub, 0, self.keys.to_bytes(), wait_ms)) is not None:
                self.roster = Roster.from_bytes(r)
        elif phase == "share":
            self.shares = getattr(self, "shares", None) or self.client.share_keys(self.roster)
            if (r := self._step(stub, 1, self.shares.to_bytes(), wait_ms)) is not None:
                self.delivery = ShareDelivery.from_bytes(r)
        elif phase == "masked":
            if self.masked is None:
                words = self.client.masked_input(self.delivery, self.delta.astype(np.float64), 10.0)
                self.masked = pack(words, self.spec.codec)
            header = masked_header(self.cid, self.model, self.round, self.masked, self.spec.codec, P_MLP, 10, {},
                                   CHUNK_BYTES, self.trained_from)
            parts = [pb.UpdatePart(header=header.to_pb())]
            raw = self.masked
            parts += [pb.UpdatePart(chunk=raw[i:i + CHUNK_BYTES]) for i in range(0, len(raw), CHUNK_BYTES)]
            assert stub.SubmitUpdate(iter(parts), timeout=TIMEOUT).accepted
        else:
            request = self._step(stub, 2, b"", wait_ms or 10_000)
            self._step(stub, 3, self.client.unmask(UnmaskRequest.from_bytes(request)).to_bytes(), 0)


def _start(mlp_artifacts, state_dir: Path, log: Path, **flags) -> CoordinatorProcess:
    return CoordinatorProcess(mlp_artifacts, state_dir, log, rounds=1, min_clients=4, round_timeout=30,
                              client_timeout=0, secagg=True, **flags)


def _run(mlp_artifacts, tmp_path: Path, kill_in: str | None, **flags) -> tuple[Path, dict[str, np.ndarray]]:
    state_dir, log = tmp_path / "state", tmp_path / "coordinator.log"
    deltas = deltas_for(IDS, P_MLP, seed=11)
    devices = [Device(c, deltas[c]) for c in IDS]
    server = _start(mlp_artifacts, state_dir, log, **flags)
    try:
        model = [server.stub.Join(pb.JoinRequest(client_id=c, device_name="t"), timeout=TIMEOUT) for c in IDS][0].model_id
        for d in devices:
            d.fit(server.stub, model)
        with ThreadPoolExecutor(len(devices)) as pool:
            for phase in PHASES:
                if phase == kill_in:
                    for d in devices[:2]:          # recorded (answered only once durable), then the crash
                        d.send(server.stub, phase, 0)
                    server.kill()
                    server = _start(mlp_artifacts, state_dir, log, **flags)
                list(pool.map(lambda d: d.send(server.stub, phase, 10_000), devices))
        deadline_polls = 0
        while server.stub.Status(pb.StatusRequest(), timeout=TIMEOUT).state != "DONE":
            deadline_polls += 1
            assert deadline_polls < 200, f"run did not finish; see {log}"
            server.stub.PollTask(pb.PollRequest(client_id=IDS[0], model_id=model, wait_ms=100), timeout=TIMEOUT)
    finally:
        server.kill()
    return state_dir, deltas, devices[0].spec.codec


def _expected(state_dir: Path, deltas: dict[str, np.ndarray]) -> np.ndarray:
    start = np.fromfile(state_dir / "vectors" / "round-0001.f32", dtype="<f4").astype(np.float64)
    total = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * 10 * 65536) for c in IDS)
    return (start + total / 65536 / (10 * len(IDS))).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("kill_in", PHASES)
def test_sigkill_in_each_phase_resumes_and_commits_every_input_once(mlp_artifacts, tmp_path, kill_in):
    state_dir, deltas, _ = _run(mlp_artifacts, tmp_path, kill_in)
    final = np.fromfile(state_dir / "vectors" / "round-0002.f32", dtype="<f4")
    np.testing.assert_array_equal(final, _expected(state_dir, deltas))
    phase = {"advertise": "advertise", "share": "share_keys", "masked": "masked_input", "unmask": "unmask"}[kill_in]
    assert f"secure aggregation resumed in phase {phase}" in (tmp_path / "coordinator.log").read_text()


@pytest.mark.slow
def test_spool_and_state_never_hold_an_individual_clear_update(mlp_artifacts, tmp_path):
    state_dir, deltas, codec = _run(mlp_artifacts, tmp_path, "masked", keep_spool=True)
    spooled = sorted((state_dir / "spool").rglob("*.f32"))
    assert len(spooled) == len(IDS) and codec.startswith("secagg-packed:")   # every masked upload, as sent
    for f in spooled:
        masked = unpack(f.read_bytes(), codec, P_MLP)[:P_MLP].astype(np.float64)
        with np.errstate(invalid="ignore"):
            as_float = np.fromfile(f, dtype="<f4")[:P_MLP].astype(np.float64)
        for c in IDS:
            for view in (masked, np.nan_to_num(as_float, posinf=0, neginf=0)):
                assert abs(np.corrcoef(view, deltas[c])[0, 1]) < 0.06, (f, c)
    everything = b"".join(p.read_bytes() for p in state_dir.rglob("*") if p.is_file())
    for c in IDS:                                          # no clear update (nor its quantized form) anywhere
        clear = deltas[c].astype("<f4").tobytes()[:64]
        quantized = np.rint(deltas[c][:8].astype(np.float64) * 10 * 65536).astype("<i8")
        packed = pack(quantized.view("<u8") & np.uint64(2**int(codec.split(":")[1]) - 1), codec)
        assert clear not in everything and quantized.tobytes() not in everything and packed not in everything



@pytest.mark.slow
def test_a_phase_close_is_answered_only_once_it_is_durable(mlp_artifacts, tmp_path):
    """Whoever hears a closed phase's answer (here the roster) finds the close already on disk, so a crash
    cannot make the restarted coordinator close the phase again and answer differently (every phase
    closes through the same `SecAggRound._close`)."""
    import json

    state_dir, log = tmp_path / "state", tmp_path / "coordinator.log"
    deltas = deltas_for(IDS, P_MLP, seed=3)
    devices = [Device(c, deltas[c]) for c in IDS]
    server = _start(mlp_artifacts, state_dir, log)
    state_file = state_dir / "secagg" / "round-0001.state"

    def advertise_then_read(d: Device) -> str:
        d.send(server.stub, "advertise", 10_000)
        return json.loads(state_file.read_bytes()[8:])["phase"]    # what a crash right now would resume from

    try:
        model = [server.stub.Join(pb.JoinRequest(client_id=c, device_name="t"), timeout=TIMEOUT) for c in IDS][0].model_id
        for d in devices:
            d.fit(server.stub, model)
        with ThreadPoolExecutor(len(devices)) as pool:
            on_disk = list(pool.map(advertise_then_read, devices))
    finally:
        server.kill()
    assert all(d.roster is not None for d in devices)
    assert on_disk == ["share_keys"] * len(IDS)
