"""edge_client/uploads/update_codec.py: the device encodes deltas, keeps top-k residuals, falls back to raw."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.uploads.update_codec import ResidualStore, UpdateEncoder, choose_codec
from fedort.protos.vector_stream import vector_digest
from fedort.protos.update_codecs import get_codec, parse_codec
from fedort.common.errors import ConfigError

from edge_support import config, digits, part, run_in_threads, server  # noqa: F401 (fixtures)

P = 20_000


def rounds_of_training(n: int, seed: int = 0):
    """(global, trained) pairs of n rounds with a drifting global vector."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(P).astype(np.float32)
    for _ in range(n):
        trained = g + (rng.standard_normal(P) * 0.01).astype(np.float32)
        yield g, trained
        g = g + (rng.standard_normal(P) * 0.001).astype(np.float32)


def test_error_feedback_sent_updates_plus_final_residual_equal_the_true_deltas():
    enc = UpdateEncoder(parse_codec("topk:0.01"), rng=np.random.default_rng(0))
    sent = np.zeros(P, dtype=np.float64)
    true = np.zeros(P, dtype=np.float64)
    for g, trained in rounds_of_training(20):
        u = enc.encode(g, b"", trained)
        sent += get_codec(u.codec).decode(u.payload, P)
        true += trained.astype(np.float64) - g
        enc.settle(u, counted=True)
    np.testing.assert_allclose(sent + enc.residual(P), true, rtol=0, atol=1e-5)
    assert np.abs(enc.residual(P)).max() > 0   # something really was held back


def test_an_upload_that_did_not_count_keeps_the_whole_corrected_delta_as_residual():
    enc = UpdateEncoder(parse_codec("topk:0.01"))
    (g, trained), = rounds_of_training(1)
    u = enc.encode(g, b"", trained)
    enc.settle(u, counted=False)
    np.testing.assert_array_equal(enc.residual(P), np.subtract(trained, g, dtype=np.float32))


def test_residuals_persist_in_the_cache_folder_across_encoders(tmp_path):
    first = UpdateEncoder(parse_codec("topk:0.05"), store=ResidualStore(tmp_path / "residuals"), key="dev|model")
    (g, trained), = rounds_of_training(1)
    first.settle(first.encode(g, b"", trained), counted=True)
    again = UpdateEncoder(parse_codec("topk:0.05"), store=ResidualStore(tmp_path / "residuals"), key="dev|model")
    np.testing.assert_array_equal(again.residual(P), first.residual(P))
    other = UpdateEncoder(parse_codec("topk:0.05"), store=ResidualStore(tmp_path / "residuals"), key="dev|model2")
    assert other.residual(P) is None


@pytest.mark.parametrize("spec", ["fp16", "bf16", "int8", "zstd+int8", "topk:1.0"])
def test_lossy_codecs_encode_the_delta_from_the_named_global_vector(spec):
    (g, trained), = rounds_of_training(1)
    u = UpdateEncoder(parse_codec(spec)).encode(g, b"", trained)
    assert u.base_sha256 == vector_digest(g) and u.codec == parse_codec(spec).canonical
    rebuilt = g + get_codec(u.codec).decode(u.payload, P)
    assert np.abs(rebuilt - trained).max() < 1e-3


def test_raw_sends_the_trained_vector_itself():
    (g, trained), = rounds_of_training(1)
    u = UpdateEncoder(parse_codec("raw")).encode(g, b"", trained)
    assert u.vector is trained and u.base_sha256 == b"" and u.nbytes == 4 * P


def test_an_fp16_overflow_uploads_raw_for_that_round(caplog):
    g = np.zeros(10, dtype=np.float32)
    trained = np.full(10, 1e6, dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="fedort.edge.codec"):
        u = UpdateEncoder(parse_codec("fp16")).encode(g, b"", trained)
    assert u.codec == "raw" and u.vector is trained and "cannot encode this update with fp16" in caplog.text


def test_a_codec_the_coordinator_does_not_allow_falls_back_to_raw(caplog):
    with caplog.at_level(logging.WARNING, logger="fedort.edge.codec"):
        assert choose_codec("int8", []).canonical == "raw"
    assert "not among the coordinator's upload codecs ['raw']" in caplog.text
    assert choose_codec("topk:0.01", ["fp16", "topk"]).canonical == "topk:0.01"


def test_edge_config_refuses_a_bad_codec_and_reads_it_from_toml(tmp_path):
    with pytest.raises(ConfigError, match="bad codec setting: unknown codec 'gzip'"):
        EdgeConfig("127.0.0.1:1", codec="gzip")
    toml = tmp_path / "edge.toml"
    toml.write_text('[edge]\ncoordinator = "127.0.0.1:7420"\ncodec = "zstd+topk:0.01"\n')
    assert EdgeConfig.load(toml).codec == "zstd+topk:0.01"
    assert EdgeConfig.load(toml, codec="int8").codec == "int8"


@pytest.mark.slow
def test_a_device_configured_for_int8_uploads_raw_to_a_coordinator_that_allows_only_raw(server, tmp_path, digits):
    address = server.start_with(rounds=1, codecs=("raw",))
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}", codec="int8"), data=part(digits, i, 2, 200))
               for i in range(2)]
    for s in run_in_threads(clients):
        assert not isinstance(s, BaseException), s
        assert s.outcome == "done" and [(r.outcome, r.codec) for r in s.reports] == [("accepted", "raw")]
        assert s.reports[0].bytes_up == 4 * clients[0].manifest.parameter_count


def test_the_task_seed_makes_stochastic_rounding_reproducible():
    (g, trained), = rounds_of_training(1)
    a, b, c = (UpdateEncoder(parse_codec("int8")).encode(g, b"", trained, seed=s) for s in (11, 11, 12))
    assert a.payload == b.payload != c.payload


@pytest.mark.slow
def test_fedort_edge_run_refuses_an_unknown_codec_before_connecting(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "fedort", "edge", "run", "--coordinator", "127.0.0.1:1",
                           "--data", str(tmp_path / "x.npz"), "--insecure", "--codec", "gzip"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1
    assert "bad codec setting: unknown codec 'gzip'" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["fp16", "int8", "zstd+int8", "topk:0.05"])
def test_devices_train_a_round_through_the_coordinator_with_each_codec(server, tmp_path, digits, codec):
    address = server.start_with(rounds=2)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}", codec=codec, topk_warmup="off"),
                          data=part(digits, i, 2, 200)) for i in range(2)]
    for s in run_in_threads(clients):
        assert not isinstance(s, BaseException), s
        assert s.outcome == "done" and [(r.outcome, r.codec) for r in s.reports] == [("accepted", codec)] * 2
        assert s.reports[0].bytes_up == get_codec(codec).payload_size(clients[0].manifest.parameter_count) or \
            codec.startswith("zstd+")

