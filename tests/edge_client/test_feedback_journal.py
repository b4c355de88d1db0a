"""edge_client/uploads/feedback_journal.py: the top-k residual on disk is a journal written before the upload and
its answer after; an unanswered journal is unsettled and yields r' or c exactly once the answer comes."""

from __future__ import annotations

import hashlib

import numpy as np

from fedort.edge_client.uploads.update_codec import ResidualStore, UpdateEncoder
from fedort.protos.update_codecs import parse_codec
from fedort.protos.messages import Metric

P = 20_000


def rounds_of_training(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(P).astype(np.float32)
    for _ in range(n):
        yield g, g + (rng.standard_normal(P) * 0.01).astype(np.float32)
        g = g + (rng.standard_normal(P) * 0.001).astype(np.float32)


def durable(folder, key="dev|model", spec="topk:0.01") -> UpdateEncoder:
    return UpdateEncoder(parse_codec(spec), store=ResidualStore(folder), key=key)


def test_the_durable_residual_is_bit_for_bit_the_in_memory_one_across_rounds_and_restarts(tmp_path):
    memory = UpdateEncoder(parse_codec("topk:0.01"))
    for i, (g, trained) in enumerate(rounds_of_training(4)):
        disk = durable(tmp_path)   # a new process each round: everything comes from the folder
        a, b = memory.encode(g, b"", trained, round=i + 1), disk.encode(g, b"", trained, round=i + 1, num_examples=5)
        assert a.payload == b.payload
        counted = i != 2           # one upload that did not count
        memory.settle(a, counted)
        disk.settle(b, counted)
    np.testing.assert_array_equal(durable(tmp_path).residual(P), memory.residual(P))


def test_a_journaled_upload_without_an_answer_is_unsettled_and_can_be_sent_again(tmp_path):
    (g, trained), = rounds_of_training(1)
    sent = durable(tmp_path).encode(g, b"\x01" * 32, trained, round=7, num_examples=42,
                                    metrics={"loss": Metric(0.5, True)})
    entry, again = durable(tmp_path).unsettled(P)                        # the process died before the answer
    assert (entry.round, entry.num_examples, entry.metrics) == (7, 42, {"loss": Metric(0.5, True)})
    assert (again.codec, again.payload, again.base_sha256, again.trained_from) == \
        (sent.codec, sent.payload, b"\x01" * 32, b"\x01" * 32)
    np.testing.assert_array_equal(again.corrected, sent.corrected)
    np.testing.assert_array_equal(again.residual, sent.residual)


def test_settling_an_unsettled_journal_gives_exactly_r_prime_or_c(tmp_path):
    (g, trained), = rounds_of_training(1)
    for counted in (True, False):
        folder = tmp_path / str(counted)
        sent = durable(folder).encode(g, b"", trained, round=1, num_examples=1)
        restarted = durable(folder)
        _, update = restarted.unsettled(P)
        restarted.settle(update, counted)
        assert restarted.unsettled(P) is None
        np.testing.assert_array_equal(durable(folder).residual(P), sent.residual if counted else sent.corrected)


def test_a_journal_with_no_answer_keeps_the_whole_corrected_delta_if_the_next_update_comes_first(tmp_path):
    (g, trained), = rounds_of_training(1)
    sent = durable(tmp_path).encode(g, b"", trained, round=1, num_examples=1)
    np.testing.assert_array_equal(durable(tmp_path).residual(P), sent.corrected)   # nothing sent is dropped


def test_a_bare_residual_file_from_before_the_journal_is_still_read(tmp_path):
    r = np.arange(P, dtype=np.float32)   # residuals/<sha256(key)[:32]>.f32, the residual's raw bytes
    (tmp_path / f"{hashlib.sha256(b'dev|model').hexdigest()[:32]}.f32").write_bytes(r.tobytes())
    np.testing.assert_array_equal(durable(tmp_path).residual(P), r)


def test_codecs_without_error_feedback_write_nothing_to_the_residual_folder(tmp_path):
    (g, trained), = rounds_of_training(1)
    for spec in ("raw", "fp16", "int8"):
        enc = durable(tmp_path / "residuals", spec=spec)
        enc.settle(enc.encode(g, b"", trained, round=1, num_examples=1), counted=True)
        assert enc.unsettled(P) is None
    assert not (tmp_path / "residuals").exists()
