"""`fedort simulate`: real coordinator + real edge clients in worker processes, end to end."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fedort.common.errors import ConfigError
from fedort.simulations.config import SimulationConfig, load_config
from fedort.simulations.runner import run_simulation

SCENARIOS = Path(__file__).resolve().parents[2] / "simulations" / "scenarios"


def _final_vector(run: Path) -> bytes:
    vectors = sorted((run / "state" / "vectors").glob("round-*.f32"))
    return vectors[-1].read_bytes()


def _small(tmp: Path, **kw) -> SimulationConfig:
    base = dict(clients=4, rounds=2, partition="iid", local_epochs=1, batch_size=32, lr=0.02, progress=False,
                workers=2, out=tmp)
    base.update(kw)
    return SimulationConfig.from_mapping(base)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The README's main job: digits, 10 clients, Dirichlet(0.5), MLP, 30 rounds."""
    cfg = load_config(SCENARIOS / "digits_dirichlet.toml", {"out": tmp_path_factory.mktemp("demo") / "run",
                                                            "progress": False})
    return run_simulation(cfg)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dirichlet_digits_reaches_95_percent_within_30_rounds(demo_run):
    assert len(demo_run.records) == 30
    best = max(r.accuracy for r in demo_run.records)
    assert best >= 0.95, [round(r.accuracy, 3) for r in demo_run.records]


@pytest.mark.slow
def test_run_folder_has_report_plot_and_model(demo_run):
    out = demo_run.out
    rows = (out / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 31 and rows[0].startswith("round,accuracy,loss,clients")
    doc = json.loads((out / "metrics.json").read_text())
    assert [r["round"] for r in doc["rounds"]] == list(range(1, 31))
    assert (out / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_final_model_serves_in_plain_onnxruntime_with_reported_accuracy(demo_run):
    test = np.load(demo_run.out / "data" / "test.npz")
    session = ort.InferenceSession(str(demo_run.model), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"x": test["x"]})[0]
    accuracy = float((logits.argmax(axis=1) == test["labels"]).mean())
    assert accuracy == pytest.approx(demo_run.final["test_accuracy"], abs=1e-9)


@pytest.mark.slow
def test_every_round_trains_every_selected_client(demo_run):
    assert all(r.clients == 10 and r.examples > 0 for r in demo_run.records)
    assert demo_run.final["fits"] == 300


@pytest.mark.slow
def test_same_seed_gives_the_same_final_global_vector(tmp_path):
    a = run_simulation(_small(tmp_path / "a", partition="dirichlet:1.0", clients=5, clients_per_round=3))
    b = run_simulation(_small(tmp_path / "b", partition="dirichlet:1.0", clients=5, clients_per_round=3))
    assert hashlib.sha256(_final_vector(a.out)).digest() == hashlib.sha256(_final_vector(b.out)).digest()
    assert [r.accuracy for r in a.records] == [r.accuracy for r in b.records]


@pytest.mark.slow
def test_a_different_seed_gives_a_different_run(tmp_path):
    a = run_simulation(_small(tmp_path / "a", seed=1))
    b = run_simulation(_small(tmp_path / "b", seed=2))
    assert _final_vector(a.out) != _final_vector(b.out)


@pytest.mark.slow
def test_clients_per_round_selects_exactly_that_many(tmp_path):
    result = run_simulation(_small(tmp_path / "run", clients=6, clients_per_round=2, rounds=3))
    assert [r.clients for r in result.records] == [2, 2, 2]


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    """The same small run on the local and the Ray backend, and what the Ray one left behind."""
    pytest.importorskip("ray", reason="Ray is not installed on this machine (pip install 'fedort[ray]')")
    import tempfile

    from fedort.simulations.workers.ray_cleanup import PREFIX, ray_processes

    tmp = tmp_path_factory.mktemp("ray")
    folders = set(Path(tempfile.gettempdir()).glob(PREFIX + "*"))
    local = run_simulation(_small(tmp / "local"))
    on_ray = run_simulation(_small(tmp / "ray", backend="ray"))
    left = {"processes": ray_processes(), "folders": set(Path(tempfile.gettempdir()).glob(PREFIX + "*")) - folders}
    return local, on_ray, left


@pytest.mark.slow
@pytest.mark.timeout(300)  # a local Ray start may be retried (simulations/workers/backends.py)
def test_ray_backend_runs_the_same_clients(ray_run):
    local, on_ray, _ = ray_run
    assert [r.clients for r in on_ray.records] == [4, 4]
    # same seed, same clients, same code path: the same global vector as the local backend
    assert _final_vector(on_ray.out) == _final_vector(local.out)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_local_ray_instance_leaves_no_process_and_no_session_folder(ray_run):
    _, _, left = ray_run
    assert left == {"processes": [], "folders": set()}


@pytest.mark.slow
def test_users_own_artifacts_and_data_folder(tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "fedort", "data", "digits", "--clients", "3", "--partition", "iid",
                    "--out", str(data)], check=True, capture_output=True, timeout=120)
    subprocess.run([sys.executable, "-m", "fedort", "artifacts", "build", "--builtin", "cnn", "--out",
                    str(tmp_path / "art")], check=True, capture_output=True, timeout=120)
    # no --clients: the folder's 3 clients are used, and the summary says so (not the default 10)
    result = run_simulation(SimulationConfig(artifacts=tmp_path / "art", data=data, rounds=2,
                                             progress=False, out=tmp_path / "run"))
    assert [r.clients for r in result.records] == [3, 3]
    assert result.final["parameters"] != 9610  # the CNN, not the built-in MLP
    lines = result.summary.splitlines()
    assert any(line.split() == ["clients", "3"] for line in lines), result.summary
    assert any(line.startswith("partition") and f"as given in {data}" in line for line in lines), result.summary
    assert "None" not in result.summary and "target accuracy" not in result.summary
    labels = [line.split("  ")[0] for line in lines]
    assert len(labels) == len(set(labels)) and "test accuracy" not in labels   # each fact once


@pytest.mark.slow
def test_a_bad_label_in_one_client_file_names_the_file_the_array_the_value_and_the_range(tmp_path):
    """A researcher with many client files learns which one is wrong, not `<arrays>`."""
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import mlp
    from fedort.simulations.workers.backends import WorkerFailed

    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "fedort", "data", "digits", "--clients", "3", "--partition", "iid",
                    "--out", str(data)], check=True, capture_output=True, timeout=120)
    bad = data / "client-0001.npz"
    arrays = dict(np.load(bad))
    arrays["labels"][5] = 12
    np.savez(bad, **arrays)
    build_artifacts(mlp(), tmp_path / "art")   # 10 classes
    with pytest.raises(WorkerFailed, match=r"client-0001\.npz: array 'labels' holds label 12 \(1 of \d+ labels out "
                                           r"of range, from 12 to 12\); the model has 10 classes, so labels must be "
                                           r"in 0\.\.9"):
        run_simulation(SimulationConfig(artifacts=tmp_path / "art", data=data, rounds=1, progress=False,
                                        out=tmp_path / "run"))


def test_artifacts_without_data_is_a_config_error():
    with pytest.raises(ConfigError, match="--artifacts and --data go together"):
        SimulationConfig(artifacts=Path("x"))


def test_unknown_scenario_setting_is_named(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("clients = 3\nround = 5\n")
    with pytest.raises(ConfigError, match=r"unknown simulation setting\(s\) 'round' \(did you mean 'rounds'\?\)"):
        load_config(bad)


def test_flag_fraction_overrides_scenario_clients_per_round():
    cfg = load_config(SCENARIOS / "digits_scale.toml", {"fraction": 0.5})
    assert cfg.clients_per_round is None and cfg.per_round == 500


def test_existing_run_folder_is_refused(tmp_path):
    (tmp_path / "state").mkdir()
    with pytest.raises(ConfigError, match="already holds a run"):
        run_simulation(_small(tmp_path))


@pytest.mark.slow
def test_simulate_help_names_every_setting():
    out = subprocess.run([sys.executable, "-m", "fedort", "simulate", "--help"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    for flag in ("--clients", "--clients-per-round", "--fraction", "--rounds", "--partition", "--model",
                 "--artifacts", "--data", "--local-epochs", "--batch-size", "--lr", "--backend", "--ray-address",
                 "--seed", "--out", "--export-every", "--state-dir", "--min-partition-size"):
        assert flag in out


@pytest.mark.slow
def test_synthetic_dataset_trains_the_logreg_model_above_the_majority_class(tmp_path):
    cfg = _small(tmp_path / "run", dataset="synthetic:1,1", clients=10, rounds=8, batch_size=10, lr=0.05)
    assert cfg.model == "logreg" and cfg.name == "synthetic"
    result = run_simulation(cfg)
    test = np.load(result.out / "data" / "test.npz")
    assert test["x"].shape[1] == 60
    majority = np.bincount(test["labels"], minlength=10).max() / len(test["labels"])
    assert result.final["test_accuracy"] > majority + 0.15, (result.final["test_accuracy"], majority)


def test_a_digits_model_on_synthetic_data_is_a_config_error():
    with pytest.raises(ConfigError, match="does not fit dataset"):
        SimulationConfig(dataset="synthetic:1,1", model="mlp")
    with pytest.raises(ConfigError, match="synthetic:ALPHA,BETA"):
        SimulationConfig(dataset="synthetic:1")


def test_prox_mu_needs_the_sgd_optimizer():
    with pytest.raises(ConfigError, match=r"prox_mu 0.1 \(FedProx\) needs optimizer = \"sgd\""):
        SimulationConfig(prox_mu=0.1)
    assert SimulationConfig(prox_mu=0.1, optimizer="sgd").prox_mu == 0.1


@pytest.mark.slow
def test_stragglers_are_a_seeded_share_that_trains_only_their_few_steps(tmp_path):
    import sqlite3

    from fedort.simulations.population import choose_stragglers

    ids = [f"client-{i:04d}" for i in range(4)]
    stragglers = choose_stragglers(ids, 0.5, seed=0)
    assert len(stragglers) == 2 and stragglers == choose_stragglers(ids, 0.5, seed=0)
    assert choose_stragglers(ids, 0.0, seed=0) == frozenset() and choose_stragglers(ids, 1.0, seed=0) == set(ids)
    result = run_simulation(_small(tmp_path / "run", rounds=1, batch_size=16, straggler_fraction=0.5,
                                   straggler_steps=2))
    with sqlite3.connect(result.out / "state" / "state.db") as db:
        examples = dict(db.execute("SELECT client_id, num_examples FROM submissions WHERE round = 1"))
    assert set(examples) == set(ids)
    assert {c for c, n in examples.items() if n == 2 * 16} == stragglers   # two steps of 16 examples
    assert all(n > 100 for c, n in examples.items() if c not in stragglers)  # a whole epoch of ~359


@pytest.mark.slow
def test_state_elsewhere_and_final_only_export_give_the_same_run(tmp_path):
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    target = Path(__import__("tempfile").mkdtemp(dir=shm)) / "state"
    try:
        fast = run_simulation(_small(tmp_path / "fast", rounds=3, export_every=0, state_dir=target))
        plain = run_simulation(_small(tmp_path / "plain", rounds=3))
        assert (fast.out / "state").resolve() == target.resolve() and (target / "state.db").is_file()
        assert _final_vector(fast.out) == _final_vector(plain.out)
        assert [r.accuracy for r in fast.records] == [r.accuracy for r in plain.records]   # every round evaluated
        models = sorted(p.parent.name for p in (target / "models").glob("round-*/model.onnx"))
        assert models == ["round-0003"]
    finally:
        __import__("shutil").rmtree(target.parent, ignore_errors=True)


def test_a_negative_export_every_is_a_config_error():
    with pytest.raises(ConfigError, match="export_every"):
        SimulationConfig(export_every=-1)


@pytest.mark.slow
def test_a_thousand_client_dirichlet_population_of_digits_gives_every_client_an_example():
    from fedort.simulations.population import digits_population

    pop = digits_population(1000, "dirichlet:0.5", seed=0)  # 1,437 training rows: every single draw leaves some empty
    assert len(pop.clients) == 1000
    assert min(len(c.indices) for c in pop.clients) >= 1
    assert np.array_equal(np.sort(np.concatenate([c.indices for c in pop.clients])), np.arange(1437))


def test_min_partition_size_reaches_the_partition():
    from fedort.simulations.population import digits_population

    assert min(len(c.indices) for c in digits_population(100, "dirichlet:0.1", seed=0, min_size=12).clients) >= 12
    with pytest.raises(ConfigError, match="cannot give 100 clients 15 examples each from 1437 examples"):
        digits_population(100, "dirichlet:0.1", seed=0, min_size=15)
    with pytest.raises(ConfigError, match="min_partition_size must be an integer >= 1"):
        SimulationConfig(min_partition_size=0)


@pytest.mark.slow
def test_a_local_worker_opens_the_runs_own_artifacts_instead_of_downloading_them(tmp_path):
    result = run_simulation(_small(tmp_path / "run", workers=1, rounds=1))
    assert [r.clients for r in result.records] == [4]
    assert not list((result.out / "cache").glob("worker-*/models/*"))   # no artifact was fetched over gRPC


@pytest.mark.slow
def test_a_large_model_s_run_folder_holds_model_onnx_with_its_external_data(tmp_path):
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import mlp

    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "fedort", "data", "digits", "--clients", "2", "--partition", "iid",
                    "--out", str(data)], check=True, capture_output=True, timeout=120)
    build_artifacts(mlp(hidden=4096), tmp_path / "art")   # 307,210 parameters: 1.2 MB, above export_external_bytes
    result = run_simulation(SimulationConfig(artifacts=tmp_path / "art", data=data, rounds=2, progress=False,
                                             out=tmp_path / "run"))
    data_file = result.model.parent / "model.onnx.data"
    assert data_file.read_bytes() == _final_vector(result.out)
    moved = tmp_path / "elsewhere"   # the two files travel together
    moved.mkdir()
    for f in (result.model, data_file):
        f.rename(moved / f.name)
    x = np.load(data / "test.npz")["x"]
    (logits,) = ort.InferenceSession(str(moved / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    labels = np.load(data / "test.npz")["labels"]
    assert float((logits.argmax(1) == labels).mean()) == pytest.approx(result.records[-1].accuracy)


def test_a_setting_like_no_known_one_is_listed_with_the_known_ones(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("clients = 3\nzzzz = 5\n")
    with pytest.raises(ConfigError, match=r"setting\(s\) 'zzzz'; expected among \[.*'rounds'"):
        load_config(bad)


def test_a_bundled_scenario_is_found_by_name():
    assert load_config("digits_dirichlet").name == load_config(SCENARIOS / "digits_dirichlet.toml").name


def test_an_unknown_scenario_name_lists_the_bundled_ones():
    with pytest.raises(ConfigError, match=r"neither a file nor a bundled scenario; bundled: .*digits_dirichlet"):
        load_config("digits_nonesuch")


def test_simulate_list_prints_every_bundled_scenario_with_its_description():
    out = subprocess.run([sys.executable, "-m", "fedort", "simulate", "--list"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    names = [line.split()[0] for line in out.splitlines()]
    assert names == sorted(p.stem for p in SCENARIOS.glob("*.toml"))
    assert any(line.startswith("digits_scale") and "THROUGHPUT" in line for line in out.splitlines())


def test_log_level_is_accepted_after_the_subcommand():
    done = subprocess.run([sys.executable, "-m", "fedort", "simulate", "--list", "--log-level", "DEBUG"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_run_on_your_own_data_is_labelled_by_its_folder_not_digits():
    assert SimulationConfig(artifacts=Path("art"), data=Path("/somewhere/my_clients")).name == "my_clients"
    assert SimulationConfig().name == "digits" and SimulationConfig(dataset="synthetic:1,1").name == "synthetic"


def _own_data(folder: Path, test_labels_up_to: int) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir()
    for i in range(2):
        np.savez(folder / f"client-{i:04d}.npz", x=rng.random((20, 64), dtype=np.float32),
                 labels=rng.integers(0, 10, 20))
    np.savez(folder / "test.npz", x=rng.random((20, 64), dtype=np.float32),
             labels=np.arange(20) % (test_labels_up_to + 1))
    return folder


def test_a_failed_run_on_your_own_data_names_your_file_and_leaves_no_run_folder(tmp_path, mlp_artifacts):
    from fedort.common.errors import DataError

    data = _own_data(tmp_path / "mine", test_labels_up_to=11)   # labels 10 and 11 do not fit 10 classes
    with pytest.raises(DataError, match=rf"^{tmp_path / 'mine' / 'test.npz'}: array 'labels' holds label"):
        run_simulation(SimulationConfig(artifacts=mlp_artifacts, data=data, rounds=1, progress=False, workers=1,
                                        out=tmp_path / "run"))
    assert not (tmp_path / "run").exists()   # so the same command runs again once the file is fixed
