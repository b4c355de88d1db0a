"""The durable half of top-k error feedback: a journal written before an upload, its outcome after.

Per residual key (device identity + model), in the device's cache folder `residuals/`:

    <h>.ef    the journal, written atomically BEFORE the upload leaves the device: the round, what
              rebuilds the upload's header, the corrected delta c (4P bytes) and the payload;
    <h>.done  the coordinator's answer to that journal: its id and whether the upload counted
              (a few bytes, written atomically after the answer; not fsynced, see write_outcome).

The residual is then r' = c - decode(payload) if the journal's upload counted, c if it did not
(decoding is deterministic, so r' is bit for bit the r' the encoder computed). A journal with no
outcome is *unsettled*: the process died between writing it and recording the answer, so nobody
knows yet whether the coordinator counted it — `EdgeClient.join()` sends the same update again and
settles it with the real answer (update_codec.py). This costs what the bare residual file did per
upload (one durable atomic write of 4P bytes, plus a few bytes after the answer). `<h>.f32`, a bare
residual written by fedort before the journal, is read while no journal exists.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedort.common.durable import atomic_write
from fedort.protos.messages import Metric
from fedort.protos.update_codecs import get_codec

_MAGIC = b"FEJ1"


@dataclass(frozen=True)
class JournalEntry:
    """One journaled top-k upload and, once known, whether the coordinator counted it."""

    id: str  # random: names this journal in its outcome file
    round: int
    codec: str  # canonical spec of the payload
    base_sha256: bytes  # the global vector the delta is taken from
    num_examples: int
    metrics: dict[str, Metric]
    corrected: np.ndarray  # c = delta + previous residual
    payload: bytes
    counted: bool | None = None  # None: unsettled (no answer recorded)

    @property
    def length(self) -> int:
        return len(self.corrected)

    def sent_residual(self) -> np.ndarray:
        """r' = c - decode(payload): what stays unsent once this upload counted (the encoder's expression)."""
        return self.corrected - get_codec(self.codec).decode(self.payload, self.length)

    def residual(self) -> np.ndarray:
        """The residual this entry leaves: r' if counted, c if not (or not known: nothing is dropped)."""
        return self.sent_residual() if self.counted else self.corrected


def new_id() -> str:
    return os.urandom(8).hex()


def write_journal(path: Path, entry: JournalEntry) -> None:
    """Durably record `entry` (before its upload is sent); replaces the previous journal of the key."""
    head = json.dumps(
        {
            "id": entry.id,
            "round": int(entry.round),
            "codec": entry.codec,
            "base_sha256": entry.base_sha256.hex(),
            "length": entry.length,
            "num_examples": int(entry.num_examples),
            "metrics": {k: [float(m.value), bool(m.sync_dist)] for k, m in entry.metrics.items()},
        }
    ).encode()
    c = np.ascontiguousarray(entry.corrected, dtype="<f4")
    atomic_write(path, [_MAGIC, struct.pack("<I", len(head)), head, c.data.cast("B"), entry.payload])


def write_outcome(path: Path, journal_id: str, counted: bool) -> None:
    """Record the coordinator's answer to journal `journal_id`: atomically, without fsync. A process crash keeps
    it; a power cut may lose it, and the journal is then unsettled and sent again, which the coordinator
    answers as before (duplicate if it counted) — no fsync pair per upload for a case that asking again covers."""
    atomic_write(path, json.dumps({"id": journal_id, "counted": bool(counted)}).encode(), durable=False)


def read_journal(path: Path, outcome: Path, length: int) -> JournalEntry | None:
    """The journal at `path` with its outcome (from `outcome`, if it names this journal); None if there is
    none, it is unreadable or it is for another vector length."""
    try:
        data = path.read_bytes()
        if data[:4] != _MAGIC:
            return None
        (n,) = struct.unpack_from("<I", data, 4)
        head = json.loads(data[8 : 8 + n])
        start = 8 + n
        if int(head["length"]) != length or len(data) < start + 4 * length:
            return None
        corrected = np.frombuffer(data, dtype="<f4", count=length, offset=start).copy()
        metrics = {k: Metric(float(v), bool(s)) for k, (v, s) in head["metrics"].items()}
        entry = JournalEntry(
            str(head["id"]),
            int(head["round"]),
            str(head["codec"]),
            bytes.fromhex(head["base_sha256"]),
            int(head["num_examples"]),
            metrics,
            corrected,
            data[start + 4 * length :],
        )
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return _with_outcome(entry, outcome)


def _with_outcome(entry: JournalEntry, outcome: Path) -> JournalEntry:
    try:
        done = json.loads(outcome.read_bytes())
    except (OSError, ValueError):
        return entry
    if not isinstance(done, Mapping) or done.get("id") != entry.id:
        return entry  # the answer to an earlier journal: this one is unsettled
    return JournalEntry(
        entry.id,
        entry.round,
        entry.codec,
        entry.base_sha256,
        entry.num_examples,
        entry.metrics,
        entry.corrected,
        entry.payload,
        bool(done.get("counted")),
    )


__all__ = ["JournalEntry", "new_id", "read_journal", "write_journal", "write_outcome"]
