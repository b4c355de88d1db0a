"""Per-round inference export: load a committed global vector and write a model plain onnxruntime serves.

After round N commits, `Exporter.export` writes `models/round-000N/model.onnx` (the eval graph
pruned to the manifest's inference outputs) for the new global vector, optionally evaluates it on a
held-out `.npz`, records everything in `model.json`, and moves the `latest` pointer. The first
export goes through ORT (`from_buffer`, `export_model_for_inferencing`) and learns where the
parameters sit (export_splice); later ones are spliced, or, for parameters of at least
`external_min_bytes`, are one model.onnx naming the committed vector file's bytes as ONNX external
data (`model.onnx.data`, a hard link: export_external). Every file is replaced atomically, so an
export interrupted by a crash is simply redone on restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedort.common.client_data import ClientData
from fedort.common.durable import atomic_write, atomic_write_json, fsync_dir, fsync_file
from fedort.common.invariants import present
from fedort.coordinator.export.external_data import DATA_FILE, EXTERNAL_MIN_BYTES, NO_LINKS, ExternalModel, link_data
from fedort.coordinator.export.splice import ModelSplice
from fedort.coordinator.state.layout import LATEST_JSON, LATEST_LINK, MODEL_FILE, RECORD_FILE, round_name
from fedort.ort.artifacts import Manifest
from fedort.ort.session import TrainingSession
from fedort.protos.vector_stream import vector_digest

log = logging.getLogger(__name__)

EVAL_BATCH = 512


@dataclass(frozen=True)
class EvalResult:
    """Server-side evaluation of one global vector on held-out data."""

    loss: float
    accuracy: float | None
    num_examples: int


def load_eval_data(path: Path, manifest: Manifest) -> list[np.ndarray]:
    """The arrays of `path` in the eval model's input order (features first, labels last).

    Read and checked against the model (dtypes, shapes, label range) by the one client-data
    reader, like every device's own data.
    """
    data = ClientData.load(path)
    data.validate(manifest.inputs, manifest.num_classes)
    return [np.ascontiguousarray(a) for a in data.arrays_for(manifest.inputs).values()]


class Exporter:
    """Owns the coordinator-side TrainingSession used to export (and evaluate) global vectors."""

    def __init__(
        self,
        artifacts_dir: Path,
        models_dir: Path,
        eval_data: Path | None = None,
        external_min_bytes: int = EXTERNAL_MIN_BYTES,
    ) -> None:
        self._session = TrainingSession.from_artifacts(artifacts_dir)
        self.manifest: Manifest = present(self._session.manifest, "the artifacts' manifest")
        self._models = models_dir
        self._eval = load_eval_data(eval_data, self.manifest) if eval_data else None
        self._external_min = external_min_bytes
        self._splice: ModelSplice | None = None
        self._external: ExternalModel | None = None  # set once learned, for parameters of >= external_min_bytes
        self._link_failed = False  # warned once: exports are self-contained from then on
        self._learned = False

    def initial_vector(self) -> np.ndarray:
        """The checkpoint's trainable vector (round 1's global vector), as an owned copy."""
        return np.array(self._session.to_buffer(), dtype=np.float32, copy=True)

    def evaluate(self, vector: np.ndarray) -> EvalResult | None:
        """Loss (and accuracy, if the model outputs logits) of `vector` on the eval data."""
        if self._eval is None:
            return None
        self._session.from_buffer(vector)
        loss_name = self.manifest.eval_outputs[0]
        has_logits = "logits" in self.manifest.eval_outputs
        n = self._eval[0].shape[0]
        loss_sum, correct = 0.0, 0
        for start in range(0, n, EVAL_BATCH):
            batch = [a[start : start + EVAL_BATCH] for a in self._eval]
            out = self._session.eval_step(*batch)
            loss_sum += float(out[loss_name]) * batch[0].shape[0]
            if has_logits:
                correct += int((np.argmax(out["logits"], axis=1) == batch[-1]).sum())
        return EvalResult(loss_sum / n, correct / n if has_logits else None, n)

    def export(
        self,
        round: int,
        vector: np.ndarray,
        record: dict[str, Any],
        model: bool = True,
        vector_file: Path | None = None,
    ) -> Path:
        """Write round `round`'s model.onnx + model.json and point `latest` at it; returns model.onnx.

        `vector_file`: the committed, durable file holding `vector` (vectors/round-000{N+1}.f32); with it,
        a large model's parameters are that file, hard-linked beside model.onnx (export_external).
        With `model=False` (a round `export_every` skips) only model.json is written, with the
        server evaluation and `"model": null`; `latest` stays; returns model.json.
        """
        start = time.perf_counter()
        out_dir = self._models / round_name(round)
        onnx = model_sha256 = data = None
        if model:
            onnx, model_sha256, data = self._write_model(out_dir / MODEL_FILE, vector, vector_file)
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
        evaluation = self.evaluate(vector)
        full = {
            **record,
            "round": round,
            "model_id": self.manifest.model_id,
            "model": MODEL_FILE if onnx else None,
            "model_sha256": model_sha256,
            # external data (export_external): the data file is the committed vector, so its sha256 is the vector's
            "model_data": data,
            "model_data_sha256": None if data is None else record.get("vector_sha256") or vector_digest(vector).hex(),
            "inference_outputs": list(self.manifest.inference_outputs),
            "exported_unix_ms": int(time.time() * 1000),
            "server_eval": None
            if evaluation is None
            else {
                "loss": _finite(evaluation.loss),
                "accuracy": evaluation.accuracy,
                "num_examples": evaluation.num_examples,
            },
        }
        atomic_write_json(out_dir / RECORD_FILE, full, sync_dir=False)
        fsync_dir(out_dir)  # once for both entries, model.onnx and model.json
        if onnx is None:
            return out_dir / RECORD_FILE
        if round >= self.latest_round():
            self.point_latest(round)
        log.info(
            "round %d: exported %s in %.0f ms%s",
            round,
            onnx,
            1000 * (time.perf_counter() - start),
            ""
            if evaluation is None
            else f" (server eval: loss {evaluation.loss:.4f}"
            + ("" if evaluation.accuracy is None else f", accuracy {evaluation.accuracy:.4f}")
            + ")",
        )
        return onnx

    def prepare(self, vector: np.ndarray) -> None:
        """Learn where the parameters sit in the exported model (export_splice) from `vector` now, before the
        first export: the two ORT exports it takes then run while clients
        join, not beside the run's second round, which they would slow down."""
        if self._learned:
            return
        try:
            self._models.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self._models, prefix=".prepare-") as folder:
                self._session.from_buffer(vector)
                exported = self._session.export_model_for_inference(Path(folder) / MODEL_FILE).read_bytes()
                self._splice = self._learn_splice(Path(folder), vector, exported)
                self._learned = True
        except Exception as e:  # an optimisation only: the first export learns it instead
            log.warning("per-round export: could not prepare before the first round (%s); the first export will", e)

    def _write_model(self, path: Path, vector: np.ndarray, vector_file: Path | None) -> tuple[Path, str, str | None]:
        """model.onnx for `vector`, fsynced (its folder is the caller's), its sha256 and its external data file's
        name (None: self-contained). Once the parameters' places are known (export_splice): model.onnx naming
        `vector_file`'s bytes (export_external) for large parameters, else spliced; until then through ORT."""
        if self._splice is None:
            self._session.from_buffer(vector)
            onnx = self._session.export_model_for_inference(path)
            fsync_file(onnx)
            data = onnx.read_bytes()
            if not self._learned:
                self._learned = True
                self._splice = self._learn_splice(path.parent, vector, data)
            if self._external is None or vector_file is None:
                _drop_data_file(path.parent)
                return onnx, hashlib.sha256(data).hexdigest(), None
        if self._external is not None and vector_file is not None and not self._link_failed:
            try:
                link_data(vector_file, path.parent, vector.nbytes)
            except OSError as e:
                if e.errno not in NO_LINKS:
                    raise  # e.g. a full disk: the export is retried (storage.retry_when_full)
                self._link_failed = True
                log.warning(
                    "per-round export: cannot hard-link %s into %s (%s); exporting self-contained models "
                    "(a copy of the parameters per round) instead",
                    vector_file,
                    path.parent,
                    e,
                )
            else:
                atomic_write(path, self._external.model, sync_dir=False)
                return path, self._external.sha256, DATA_FILE
        digest = hashlib.sha256()

        def hashed(chunks):  # each piece hashed as it is written, while in cache
            for chunk in chunks:
                digest.update(chunk)
                yield chunk

        atomic_write(path, hashed(present(self._splice, "the learned splice").chunks(vector)), sync_dir=False)
        _drop_data_file(path.parent)
        return path, digest.hexdigest(), None

    def _learn_splice(self, folder: Path, vector: np.ndarray, exported: bytes) -> ModelSplice | None:
        """Once: ORT's export of the probe vector gives the parameters' places; kept only if it renders
        `exported` (ORT's export of `vector`) byte for byte."""
        probe = folder / ".probe.onnx"
        try:
            self._session.from_buffer(ModelSplice.probe(vector.size))
            splice = ModelSplice.learn(self._session.export_model_for_inference(probe).read_bytes(), vector.size)
        except Exception as e:  # an optimisation only: ORT keeps exporting
            log.warning("per-round export stays with ORT: the probe export failed (%s)", e)
            return None
        finally:
            probe.unlink(missing_ok=True)
            self._session.from_buffer(vector)
        if splice is not None and splice.render(vector) != exported:
            splice = None
        if splice is not None and splice.nbytes >= self._external_min:
            self._external = ExternalModel.of(splice)
        log.info(
            "per-round export: %s",
            "through ORT (the parameters could not be located exactly in the exported model)"
            if splice is None
            else "model.onnx + its parameters as external data, a hard link to the committed vector (export_external)"
            if self._external
            else "spliced from here on (export_splice)",
        )
        return splice

    def latest_round(self) -> int:
        try:
            return int(json.loads((self._models / LATEST_JSON).read_text())["round"])
        except (OSError, ValueError, KeyError):
            return 0

    def point_latest(self, round: int) -> None:
        """Atomically move `models/latest.json` and the `models/latest` symlink to round `round`."""
        name = round_name(round)
        atomic_write_json(
            self._models / LATEST_JSON,
            {"round": round, "dir": name, "model": f"{name}/{MODEL_FILE}", "record": f"{name}/{RECORD_FILE}"},
            sync_dir=False,
        )
        tmp = self._models / f".{LATEST_LINK}.tmp-{os.getpid()}"
        try:
            tmp.unlink(missing_ok=True)
            os.symlink(name, tmp)
            os.replace(tmp, self._models / LATEST_LINK)
        except OSError as e:  # e.g. a filesystem without symlinks: latest.json alone is the pointer
            log.debug("could not update the latest symlink: %s", e)
        fsync_dir(self._models)  # once for both renames, latest.json and the symlink


def _drop_data_file(folder: Path) -> None:
    """A self-contained model.onnx was written: an earlier export's external data file is no longer part of it."""
    (folder / DATA_FILE).unlink(missing_ok=True)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
