"""edge_client/uploads/topk_warmup.py and the top-k error feedback across warm-up, skipped rounds and restarts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedort.edge_client import EdgeClient
from fedort.edge_client.uploads.topk_warmup import TopkWarmup
from fedort.edge_client.uploads.update_codec import ResidualStore, encoder_for
from fedort.protos.update_codecs import get_codec, parse_codec
from fedort.common.errors import ConfigError
from fedort.simulations.config import SimulationConfig

from edge_support import config, digits, part, run_in_threads, server  # noqa: F401 (fixtures)

P = 10_000


def test_the_default_schedule_starts_at_three_times_f_and_decays_geometrically_to_f_after_round_45():
    w = TopkWarmup.parse(None)
    fractions = [w.fraction(0.01, t) for t in range(1, 61)]
    assert fractions[0] == 0.03
    assert all(a > b for a, b in zip(fractions[:45], fractions[1:45]))
    assert fractions[14] == pytest.approx(0.01 * 3 ** (1 - 14 / 45), rel=1e-3)
    assert fractions[45:] == [0.01] * 15


def test_the_schedule_is_capped_at_one_and_off_means_f_throughout():
    assert TopkWarmup.parse("10x5").fraction(0.5, 1) == 1.0
    off = TopkWarmup.parse("off")
    assert not off.active and [off.fraction(0.01, t) for t in (1, 2, 40)] == [0.01] * 3


@pytest.mark.parametrize("text", ["3", "x30", "0.5x30", "3x-1", "threex30", 30])
def test_a_malformed_schedule_is_a_config_error_naming_the_form(text):
    with pytest.raises(ConfigError, match="FACTORxROUNDS"):
        TopkWarmup.parse(text)


def test_a_simulation_refuses_a_malformed_warmup():
    with pytest.raises(ConfigError, match="FACTORxROUNDS"):
        SimulationConfig(topk_warmup="3by30")


def test_warmup_fractions_are_sent_where_the_family_is_allowed_and_f_where_only_f_is():
    rng = np.random.default_rng(0)
    g, trained = np.zeros(P, np.float32), rng.standard_normal(P).astype(np.float32)
    warm = TopkWarmup.parse("3x30")
    family = encoder_for("topk:0.01", ["raw", "topk"], key="a", warmup=warm)
    exact = encoder_for("topk:0.01", ["raw", "topk:0.01"], key="b", warmup=warm)
    u, v = family.encode(g, b"", trained, round=1), exact.encode(g, b"", trained, round=1)
    assert (u.codec, len(u.payload)) == ("topk:0.03", 8 * math.ceil(0.03 * P))
    assert (v.codec, len(v.payload)) == ("topk:0.01", 8 * math.ceil(0.01 * P))
    assert family.encode(g, b"", trained, round=31).codec == "topk:0.01"


def test_error_feedback_holds_across_the_changing_fractions_of_the_warmup():
    rng = np.random.default_rng(1)
    enc = encoder_for("topk:0.01", ["topk"], key="k", warmup=TopkWarmup.parse("4x6"))
    g = rng.standard_normal(P).astype(np.float32)
    sent, true, specs = np.zeros(P), np.zeros(P), set()
    for t in range(1, 10):
        trained = g + (rng.standard_normal(P) * 0.01).astype(np.float32)
        u = enc.encode(g, b"", trained, round=t)
        specs.add(u.codec)
        sent += get_codec(u.codec).decode(u.payload, P)
        true += trained.astype(np.float64) - g
        enc.settle(u, counted=True)
        g = g + (rng.standard_normal(P) * 0.001).astype(np.float32)
    assert len(specs) == 7   # six warm-up fractions, then F
    np.testing.assert_allclose(sent + enc.residual(P), true, rtol=0, atol=1e-5)


def test_after_skipped_rounds_the_residual_is_added_to_the_delta_from_the_new_global():
    rng = np.random.default_rng(2)
    enc = encoder_for("topk:0.01", ["topk:0.01"], key="k")
    g1 = rng.standard_normal(P).astype(np.float32)
    u1 = enc.encode(g1, b"", g1 + rng.standard_normal(P).astype(np.float32), round=1)
    enc.settle(u1, counted=True)
    r1 = enc.residual(P).copy()
    # rounds 2 and 3 pass without this device; the global moved meanwhile
    g4 = g1 + rng.standard_normal(P).astype(np.float32)
    t4 = g4 + rng.standard_normal(P).astype(np.float32)
    u4 = enc.encode(g4, b"", t4, round=4)
    np.testing.assert_array_equal(u4.corrected, (t4 - g4) + r1)
    kept = get_codec(u4.codec).decode(u4.payload, P)
    idx = np.flatnonzero(kept)
    assert len(idx) == math.ceil(0.01 * P)
    assert np.abs(u4.corrected[idx]).min() >= np.abs(np.delete(u4.corrected, idx)).max()


def test_the_residual_survives_a_restart_of_the_device_in_its_cache_folder(tmp_path):
    rng = np.random.default_rng(3)
    g = rng.standard_normal(P).astype(np.float32)
    before = encoder_for("topk:0.01", ["topk"], key="dev|model", folder=tmp_path)
    u = before.encode(g, b"", g + rng.standard_normal(P).astype(np.float32), round=1)
    before.settle(u, counted=True)
    after = encoder_for("topk:0.01", ["topk"], key="dev|model", folder=tmp_path)   # a new process: empty memory
    np.testing.assert_array_equal(after.residual(P), u.residual)
    assert ResidualStore(tmp_path).load("dev|other-model", P) is None


@pytest.mark.slow
def test_devices_upload_the_warmup_fractions_through_the_coordinator(server, tmp_path, digits):
    address = server.start_with(rounds=2)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}", codec="topk:0.05", topk_warmup="3x30"),
                          data=part(digits, i, 2, 200)) for i in range(2)]
    want = [TopkWarmup(3.0, 30).spec(parse_codec("topk:0.05"), t).canonical for t in (1, 2)]
    assert want == ["topk:0.15", "topk:0.1446"]
    for s in run_in_threads(clients):
        assert not isinstance(s, BaseException), s
        assert s.outcome == "done" and [(r.outcome, r.codec) for r in s.reports] == list(zip(["accepted"] * 2, want))
