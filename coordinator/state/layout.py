"""Every path inside a coordinator state directory, in one place.

state.db                          SQLite (WAL, synchronous=FULL): meta, clients, rounds, submissions,
                                  evaluations, transitions
artifacts/                        the coordinator's own verified copy of the training artifacts
vectors/round-000N.f32            the global vector round N trains from (raw little-endian float32);
                                  round-0001 is the checkpoint's, round-000{R+1} is the run's result.
                                  Written once (atomic_write: a new file renamed into place), NEVER
                                  changed in place nor recycled: exports (model.onnx.data) and
                                  local_vectors (global/<sha256>.f32) hard-link it
server-state/round-000N.npz       the server optimizer's state round N starts from (stateful ones only)
spool/round-000N/<client>.f32     accepted updates of round N, until the round commits
models/round-000N/                model.onnx + model.json exported after round N commits, + model.onnx.data
                                  (a hard link to vectors/round-000{N+1}.f32) for a large model (export_external)
models/latest.json, latest        pointer (and symlink) to the newest export
local-vectors/                    where `fedort simulate` puts the co-located vector path's directory
                                  (`local_vector_dir`): devices' update files, global/<sha256>.f32 links
"""

from __future__ import annotations

import os
from pathlib import Path

DB_NAME = "state.db"
MODEL_FILE = "model.onnx"
RECORD_FILE = "model.json"
LATEST_JSON = "latest.json"
LATEST_LINK = "latest"


def round_name(round: int) -> str:
    """The per-round file or folder stem: round-000N."""
    return f"round-{round:04d}"


class StateLayout:
    """Paths of one state directory (nothing is created or read here)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    @property
    def db(self) -> Path:
        return self.root / DB_NAME

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def artifacts_tmp(self) -> Path:
        return self.root / ".artifacts.tmp"

    @property
    def vectors(self) -> Path:
        return self.root / "vectors"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def server_states(self) -> Path:
        return self.root / "server-state"

    @property
    def local_vectors(self) -> Path:
        return self.root / "local-vectors"

    def reserved(self) -> set[Path]:
        """The state dir and the folders the coordinator owns in it (no other use may claim them)."""
        return {
            self.root,
            self.artifacts,
            self.artifacts_tmp,
            self.vectors,
            self.spool,
            self.models,
            self.server_states,
        }

    def vector(self, round: int) -> Path:
        return self.vectors / f"{round_name(round)}.f32"

    def server_state(self, round: int) -> Path:
        return self.server_states / f"{round_name(round)}.npz"

    def spool_dir(self, round: int) -> Path:
        return self.spool / round_name(round)

    def spool_file(self, round: int, client_id: str) -> Path:
        return self.spool_dir(round) / f"{client_id}.f32"

    def spool_temp(self, round: int, client_id: str, n: int) -> Path:
        """A fresh temporary spool name for an update being received (renamed into place when accepted)."""
        return self.spool_dir(round) / f".{client_id}.{os.getpid()}.{n}.tmp"

    def model_dir(self, round: int) -> Path:
        return self.models / round_name(round)

    def model_file(self, round: int) -> Path:
        return self.model_dir(round) / MODEL_FILE

    def model_record(self, round: int) -> Path:
        return self.model_dir(round) / RECORD_FILE

    @property
    def latest_json(self) -> Path:
        return self.models / LATEST_JSON

    def relative(self, path: Path) -> str:
        """`path` as the database records it: relative to the state directory."""
        return str(path.relative_to(self.root))
