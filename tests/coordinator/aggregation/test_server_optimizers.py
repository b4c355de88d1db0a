"""Server optimizers: each one's K steps against an independent numpy reference of the paper's
equations (written in Reddi et al.'s / Flower's convention: direction c − x, step x + η·m/(√v+τ)),
FedAvg bit for bit, save/load continuing a run identically, spec parsing and its errors."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fedort.coordinator.aggregation.weighted_sum import WeightedSum
from fedort.coordinator.aggregation.server_optimizers import OPTIMIZERS, canonical_spec, parse_server_optimizer
from fedort.common.errors import ConfigError, VectorError

P = 1000
K = 6


def _inputs(seed: int = 0, length: int = P, steps: int = K):
    rng = np.random.default_rng(seed)
    x0 = rng.normal(0, 1, length).astype(np.float32)
    combined = [(x0 + rng.normal(0, 0.1, length)).astype(np.float32) for _ in range(steps)]
    return x0, combined


def _run(spec: str, x0, combined):
    opt = parse_server_optimizer(spec)
    x, out = x0, []
    for c in combined:
        x = opt.apply(x, c)
        out.append(x)
    return opt, out


# ---- independent references: float64, the paper's update direction d = c − x ------------------

def ref_fedavgm(x0, combined, lr, momentum):
    x, buf, out = x0.astype(np.float64), None, []
    for c in combined:
        grad = x - c                       # Hsu et al.: pseudo-gradient = old − new
        buf = grad if buf is None else momentum * buf + grad
        x = x - lr * buf
        out.append(x)
    return out


def ref_adaptive(kind, x0, combined, lr, beta1, beta2, tau, correction="none"):
    x = x0.astype(np.float64)
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    out = []
    for t, c in enumerate(combined, start=1):
        d = c.astype(np.float64) - x       # Reddi et al. Δ_t: average client update
        m = beta1 * m + (1 - beta1) * d
        if kind == "adagrad":
            v = v + d ** 2
        elif kind == "adam":
            v = beta2 * v + (1 - beta2) * d ** 2
        else:  # yogi
            v = v - (1 - beta2) * d ** 2 * np.sign(v - d ** 2)
        eta = lr
        if correction != "none":
            k = t if correction == "adam" else t + 1
            eta = lr * math.sqrt(1 - beta2 ** k) / (1 - beta1 ** k)
        x = x + eta * m / (np.sqrt(v) + tau)
        out.append(x)
    return out


CASES = [
    ("fedavgm:lr=0.7,momentum=0.9", lambda x0, c: ref_fedavgm(x0, c, 0.7, 0.9)),
    ("fedavgm:lr=1,momentum=0", lambda x0, c: ref_fedavgm(x0, c, 1.0, 0.0)),
    ("fedadagrad:lr=0.05,beta1=0,tau=1e-3", lambda x0, c: ref_adaptive("adagrad", x0, c, 0.05, 0.0, 0.0, 1e-3)),
    ("fedadagrad:lr=0.05,beta1=0.9,tau=1e-2", lambda x0, c: ref_adaptive("adagrad", x0, c, 0.05, 0.9, 0.0, 1e-2)),
    ("fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3,bias_correction=none", lambda x0, c: ref_adaptive("adam", x0, c, 0.01, 0.9, 0.99, 1e-3)),
    ("fedadam:lr=0.1,beta1=0.5,beta2=0.9,tau=1e-9,bias_correction=adam",
     lambda x0, c: ref_adaptive("adam", x0, c, 0.1, 0.5, 0.9, 1e-9, "adam")),
    ("fedadam:lr=0.1,beta1=0.9,beta2=0.99,tau=1e-9,bias_correction=flower",
     lambda x0, c: ref_adaptive("adam", x0, c, 0.1, 0.9, 0.99, 1e-9, "flower")),
    ("fedyogi:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3", lambda x0, c: ref_adaptive("yogi", x0, c, 0.01, 0.9, 0.99, 1e-3)),
    ("fedyogi:lr=0.03,beta1=0,beta2=0.5,tau=0.1", lambda x0, c: ref_adaptive("yogi", x0, c, 0.03, 0.0, 0.5, 0.1)),
]


@pytest.mark.parametrize("spec, reference", CASES, ids=[c[0] for c in CASES])
def test_k_steps_match_the_papers_equations(spec, reference):
    x0, combined = _inputs()
    _, got = _run(spec, x0, combined)
    want = reference(x0, combined)
    for t, (g, w) in enumerate(zip(got, want), start=1):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{spec} step {t}")


def test_steps_move_toward_the_combined_vector():
    # The sign: with every update pointing the same way, each optimizer steps that way.
    x0 = np.zeros(8, np.float32)
    for name in OPTIMIZERS:
        out = parse_server_optimizer(name).apply(x0, np.ones(8, np.float32))
        assert (out > 0).all() and (out <= 1).all(), name


def test_fedadagrad_reproduces_flowers_published_example():
    # Flower's fedadagrad_test: global 0.1, clients 0.2 and 1.0 (5 examples each), eta 0.1, tau 0.5 -> 0.15.
    total = WeightedSum(4)
    total.add(np.full(4, 0.2, np.float32), 5)
    total.add(np.full(4, 1.0, np.float32), 5)
    out = parse_server_optimizer("fedadagrad:lr=0.1,beta1=0,tau=0.5").apply(np.full(4, 0.1, np.float32), total.mean())
    np.testing.assert_allclose(out, 0.15, rtol=1e-6)


def test_fedavg_returns_the_combined_vector_bit_for_bit():
    x0, (c, *_) = _inputs()
    out = parse_server_optimizer("fedavg").apply(x0, c)
    assert out.dtype == np.float32 and np.array_equal(out.view(np.uint32), c.view(np.uint32))


def test_fedavg_of_a_float64_mean_is_that_mean_rounded_once():
    rng = np.random.default_rng(3)
    total = WeightedSum(P, np.dtype(np.float64))
    for n in (3, 7, 11):
        total.add(rng.normal(size=P).astype(np.float32), n)
    exact = total.total / total.weight
    out = parse_server_optimizer("fedavg").apply(np.zeros(P, np.float32), exact)
    assert np.array_equal(out.view(np.uint32), exact.astype(np.float32).view(np.uint32))
    assert np.array_equal(out.view(np.uint32), total.mean().view(np.uint32))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_save_and_load_continue_a_run_exactly(name, tmp_path):
    x0, combined = _inputs(seed=1)
    _, straight = _run(name, x0, combined)

    first = parse_server_optimizer(name)
    x = x0
    for c in combined[:3]:
        x = first.apply(x, c)
    first.save(tmp_path / "opt.npz")
    del first
    resumed = parse_server_optimizer(name)          # a fresh process would do the same
    resumed.load(tmp_path / "opt.npz", length=P)
    assert resumed.step == 3
    for c in combined[3:]:
        x = resumed.apply(x, c)
    assert np.array_equal(x.view(np.uint32), straight[-1].view(np.uint32))


@pytest.mark.parametrize("name, moments", [("fedavg", ()), ("fedavgm", ("m",)), ("fedadagrad", ("m", "v")),
                                           ("fedadam", ("m", "v")), ("fedyogi", ("m", "v"))])
def test_state_holds_one_float32_vector_per_moment(name, moments):
    opt = parse_server_optimizer(name)
    assert opt.state() == {"step": 0}
    x0, combined = _inputs(length=7, steps=2)
    opt.apply(x0, combined[0])
    state = opt.state()
    assert state["step"] == 1 and sorted(set(state) - {"step"}) == sorted(moments)
    for m in moments:
        assert state[m].shape == (7,) and state[m].dtype == np.float32 and not state[m].flags.writeable


def test_state_arrays_are_snapshots_a_later_step_does_not_change():
    x0, combined = _inputs(length=5, steps=2)
    opt = parse_server_optimizer("fedadam")
    x = opt.apply(x0, combined[0])
    before = {k: np.copy(v) for k, v in opt.state().items() if k != "step"}
    held = opt.state()
    opt.apply(x, combined[1])
    for k, v in before.items():
        assert np.array_equal(held[k], v)


def test_load_state_dict_round_trip_continues_identically():
    x0, combined = _inputs(seed=2)
    a = parse_server_optimizer("fedyogi")
    x = a.apply(x0, combined[0])
    b = parse_server_optimizer(str(a))
    b.load_state(a.state())
    assert np.array_equal(a.apply(x, combined[1]), b.apply(x, combined[1]))


def test_a_failed_step_leaves_the_state_unchanged():
    x0, combined = _inputs(length=6, steps=1)
    opt = parse_server_optimizer("fedadam")
    x = opt.apply(x0, combined[0])
    state = opt.state()
    bad = combined[0].copy()
    bad[2] = np.nan
    with pytest.raises(VectorError, match="non-finite"):
        opt.apply(x, bad)
    assert opt.state()["step"] == 1 and opt.state()["m"] is state["m"]


def test_vectors_of_another_length_than_the_state_are_refused():
    opt = parse_server_optimizer("fedavgm")
    opt.apply(np.zeros(4, np.float32), np.ones(4, np.float32))
    with pytest.raises(VectorError, match="state is for 4 elements"):
        opt.apply(np.zeros(5, np.float32), np.ones(5, np.float32))


@pytest.mark.slow
def test_global_vector_must_be_float32():
    with pytest.raises(VectorError, match="global vector must be a 1-D float32"):
        parse_server_optimizer("fedadam").apply(np.zeros(3), np.zeros(3))


def test_a_state_file_of_another_spec_is_refused_naming_the_file(tmp_path):
    opt = parse_server_optimizer("fedadam:lr=0.01")
    opt.apply(np.zeros(3, np.float32), np.ones(3, np.float32))
    opt.save(tmp_path / "opt.npz")
    other = parse_server_optimizer("fedadam:lr=0.1")
    with pytest.raises(ConfigError, match=r"opt\.npz holds the state of server optimizer 'fedadam:lr=0.01,"):
        other.load(tmp_path / "opt.npz")
    assert other.step == 0


def test_a_state_file_of_another_vector_length_is_refused_naming_the_file(tmp_path):
    opt = parse_server_optimizer("fedyogi")
    opt.apply(np.zeros(3, np.float32), np.ones(3, np.float32))
    opt.save(tmp_path / "opt.npz")
    with pytest.raises(VectorError, match=r"opt\.npz holds server optimizer state for vectors of 3 elements.* 5"):
        parse_server_optimizer("fedyogi").load(tmp_path / "opt.npz", length=5)


def test_a_state_file_one_step_ahead_of_the_committed_rounds_is_refused(tmp_path):
    opt = parse_server_optimizer("fedavgm")
    x = np.zeros(3, np.float32)
    for _ in range(3):
        x = opt.apply(x, np.ones(3, np.float32))
    opt.save(tmp_path / "opt.npz")
    with pytest.raises(ConfigError, match=r"opt\.npz holds server optimizer state after step 3, expected step 2"):
        parse_server_optimizer("fedavgm").load(tmp_path / "opt.npz", step=2)
    again = parse_server_optimizer("fedavgm")
    again.load(tmp_path / "opt.npz", length=3, step=3)
    assert again.step == 3


def test_a_corrupt_state_file_is_refused_naming_the_file(tmp_path):
    opt = parse_server_optimizer("fedavgm")
    opt.apply(np.zeros(300, np.float32), np.ones(300, np.float32))
    path = tmp_path / "opt.npz"
    opt.save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"opt\.npz"):
        parse_server_optimizer("fedavgm").load(path)


def test_saving_replaces_the_file_atomically_and_leaves_no_temp_files(tmp_path):
    opt = parse_server_optimizer("fedadam")
    x = np.zeros(3, np.float32)
    for _ in range(2):
        x = opt.apply(x, np.ones(3, np.float32))
        opt.save(tmp_path / "opt.npz")
    assert [p.name for p in tmp_path.iterdir()] == ["opt.npz"]
    again = parse_server_optimizer("fedadam")
    again.load(tmp_path / "opt.npz")
    assert again.step == 2


# ---- specs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, canonical", [
    ("fedavg", "fedavg"),
    (" FedAdam ", "fedadam:lr=0.1,beta1=0.9,beta2=0.99,tau=0.001,bias_correction=flower"),
    ("fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3", "fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=0.001,bias_correction=flower"),
    ("fedyogi:tau=1e-9, lr=0.5", "fedyogi:lr=0.5,beta1=0.9,beta2=0.99,tau=1e-09"),
    ("fedavgm:momentum=0", "fedavgm:lr=1.0,momentum=0.0"),
    ("fedadagrad:beta1=0.5", "fedadagrad:lr=0.1,beta1=0.5,tau=0.001"),
])
def test_str_is_the_canonical_spec_and_parses_back_to_itself(spec, canonical):
    assert str(parse_server_optimizer(spec)) == canonical
    assert canonical_spec(canonical) == canonical


@pytest.mark.parametrize("spec, message", [
    ("adam", "unknown server optimizer 'adam'"),
    ("", "unknown server optimizer ''"),
    ("fedadam:gamma=1", "has no option 'gamma'; its options: lr, beta1, beta2, tau, bias_correction"),
    ("fedavg:lr=1", "fedavg' takes no options"),
    ("fedadam:lr", "expected KEY=VALUE, got 'lr'"),
    ("fedadam:lr=abc", "lr must be a number, got 'abc'"),
    ("fedadam:lr=0", "lr must be a finite number > 0, got 0.0"),
    ("fedadam:lr=-1", "lr must be a finite number > 0"),
    ("fedadam:lr=inf", "lr must be a finite number > 0"),
    ("fedadam:beta1=1", "beta1 must be a number in [0, 1), got 1.0"),
    ("fedyogi:beta2=-0.1", "beta2 must be a number in [0, 1)"),
    ("fedavgm:momentum=1.5", "momentum must be a number in [0, 1)"),
    ("fedadagrad:tau=0", "tau must be a finite number > 0"),
    ("fedadagrad:beta2=0.9", "has no option 'beta2'"),
    ("fedadam:lr=0.1,lr=0.2", "option 'lr' given twice"),
    ("fedadam:bias_correction=yes", "bias_correction must be one of none, adam, flower"),
])
def test_bad_specs_say_what_was_expected(spec, message):
    with pytest.raises(ConfigError) as err:
        parse_server_optimizer(spec)
    assert message in str(err.value)


def test_a_non_string_spec_is_refused():
    with pytest.raises(ConfigError, match="must be a string"):
        parse_server_optimizer(None)


# ---- a real crash: SIGKILL while the state file is being rewritten ------------------------------

_WRITER = """
import sys
import numpy as np
from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer
spec, path, length = sys.argv[1], sys.argv[2], int(sys.argv[3])
opt = parse_server_optimizer(spec)
x = np.random.default_rng(0).normal(size=length).astype(np.float32)
t = 0
while True:
    c = (x + np.random.default_rng(t + 1).normal(0, 0.1, length)).astype(np.float32)
    x = opt.apply(x, c)
    opt.save(path)
    t += 1
"""


@pytest.mark.slow
def test_a_state_file_survives_sigkill_as_an_exact_snapshot_of_some_step(tmp_path):
    spec, length, path = "fedyogi:lr=0.05", 200_000, tmp_path / "opt.npz"
    child = subprocess.Popen([sys.executable, "-c", _WRITER, spec, str(path), str(length)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:                                   # wait until the child has saved step 4 or later
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "the writer saved no 4th step within 60 s"
            probe = parse_server_optimizer(spec)
            if path.exists():
                probe.load(path)
                if probe.step >= 4:
                    break
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        child.stderr.close()

    survived = parse_server_optimizer(spec)
    survived.load(path, length=length)                # whole and consistent, whatever the kill interrupted
    replay = parse_server_optimizer(spec)
    x = np.random.default_rng(0).normal(size=length).astype(np.float32)
    for t in range(survived.step):
        x = replay.apply(x, (x + np.random.default_rng(t + 1).normal(0, 0.1, length)).astype(np.float32))
    for key in ("m", "v"):
        assert np.array_equal(survived.state()[key], replay.state()[key])


# the defaults of Flower's current (Message API) strategies, flwr.serverapp.strategy: FedAvgM(server_learning_rate,
# server_momentum), FedAdagrad(eta, tau; beta_1 fixed at 0), FedAdam(eta, beta_1, beta_2, tau; its bias correction),
# FedYogi(eta, beta_1, beta_2, tau)
@pytest.mark.parametrize("name, flower", [
    ("fedavgm", "fedavgm:lr=1.0,momentum=0.0"),
    ("fedadagrad", "fedadagrad:lr=0.1,beta1=0.0,tau=0.001"),
    ("fedadam", "fedadam:lr=0.1,beta1=0.9,beta2=0.99,tau=0.001,bias_correction=flower"),
    ("fedyogi", "fedyogi:lr=0.01,beta1=0.9,beta2=0.99,tau=0.001"),
])
def test_the_defaults_are_those_of_flowers_message_api_strategies(name, flower):
    assert str(parse_server_optimizer(name)) == flower
