"""coordinator/state/store.py: the state dir's SQLite schema, ownership by one model, atomic files."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from fedort.coordinator.state.store import StateStore, read_vector
from fedort.coordinator.state.schema import SubmissionRow
from fedort.common.durable import atomic_write
from fedort.common.errors import ConfigError


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "state")
    yield s
    s.close()


def test_database_is_wal_with_full_sync(store):
    db = sqlite3.connect(store.dir / "state.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "clients", "rounds", "submissions", "evaluations"} <= tables
    db.close()


def test_a_state_dir_belongs_to_one_model(store):
    store.claim("a" * 64, "{}")
    store.claim("a" * 64, '{"rounds": 3}')   # the same model may restart with a new config
    with pytest.raises(ConfigError, match="belongs to model aaaaaaaa"):
        store.claim("b" * 64, "{}")


def test_one_submission_per_client_and_round(store):
    row = SubmissionRow(1, "client-a", 10, {}, "00" * 32, "spool/round-0001/client-a.f32", 0)
    store.add_submission(row)
    with pytest.raises(sqlite3.IntegrityError):
        store.add_submission(row)
    assert store.submissions(1) == [row]


def test_round_rows_record_the_life_cycle(store):
    store.open_round(1, 1, ["b", "a"], 123)
    store.commit_round(1, "ab" * 32, 2, 40, {"loss": 0.5})
    store.mark_exported(1, "models/round-0001/model.onnx")
    (row,) = store.rounds()
    assert (row.state, row.selected, row.clients, row.examples, row.metrics) == ("EXPORTED", ("a", "b"), 2, 40,
                                                                                 {"loss": 0.5})


def test_atomic_write_replaces_whole_files_and_leaves_no_temp(tmp_path):
    path = tmp_path / "vectors" / "round-0001.f32"
    atomic_write(path, np.arange(5, dtype=np.float32))
    atomic_write(path, np.arange(7, dtype=np.float32))
    np.testing.assert_array_equal(read_vector(path, 7), np.arange(7, dtype=np.float32))
    assert os.listdir(path.parent) == ["round-0001.f32"]


def test_readonly_store_of_a_missing_dir_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no coordinator state"):
        StateStore(tmp_path / "nothing", readonly=True)


def test_readonly_reader_sees_rows_while_the_writer_is_open(store):
    store.claim("c" * 64, "{}")
    store.open_round(1, 1, ["a"], 0)
    reader = StateStore(store.dir, readonly=True)
    try:
        assert [r.round for r in reader.rounds()] == [1] and reader.get_meta("model_id") == "c" * 64
    finally:
        reader.close()
