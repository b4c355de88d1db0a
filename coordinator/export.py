"""Per-round inference export: load a committed global vector and write a model plain onnxruntime serves.

After round N commits, `Exporter.export` loads the new global vector into the coordinator's own
TrainingSession (`from_buffer`), writes `models/round-000N/model.onnx` (the eval graph pruned to
the manifest's inference outputs), optionally evaluates it on a held-out `.npz`, records
everything in `model.json`, and moves the `latest` pointer. Every file is replaced atomically, so
an export interrupted by a crash is simply redone on restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedort.coordinator.state_layout import LATEST_JSON, LATEST_LINK, MODEL_FILE, RECORD_FILE, round_name
from fedort.coordinator.export_splice import ModelSplice
from fedort.durable import atomic_write, atomic_write_json, fsync_dir, fsync_file
from fedort.edge_client.artifacts import Manifest
from fedort.edge_client.client_data import ClientData
from fedort.edge_client.session import TrainingSession

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

    def __init__(self, artifacts_dir: Path, models_dir: Path, eval_data: Path | None = None) -> None:
        self._session = TrainingSession.from_artifacts(artifacts_dir)
        self.manifest: Manifest = self._session.manifest
        self._models = models_dir
        self._eval = load_eval_data(eval_data, self.manifest) if eval_data else None
        self._splice: ModelSplice | None = None
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
            batch = [a[start:start + EVAL_BATCH] for a in self._eval]
            out = self._session.eval_step(*batch)
            loss_sum += float(out[loss_name]) * batch[0].shape[0]
            if has_logits:
                correct += int((np.argmax(out["logits"], axis=1) == batch[-1]).sum())
        return EvalResult(loss_sum / n, correct / n if has_logits else None, n)

    def export(self, round: int, vector: np.ndarray, record: dict[str, Any], model: bool = True) -> Path:
        """Write round `round`'s model.onnx + model.json and point `latest` at it; returns model.onnx.

        With `model=False` (a round `export_every` skips) only model.json is written, with the
        server evaluation and `"model": null`; `latest` stays; returns model.json.
        """
        start = time.perf_counter()
        out_dir = self._models / round_name(round)
        onnx = model_sha256 = None
        if model:
            onnx, model_sha256 = self._write_model(out_dir / MODEL_FILE, vector)
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
        evaluation = self.evaluate(vector)
        full = {
            **record,
            "round": round,
            "model_id": self.manifest.model_id,
            "model": MODEL_FILE if onnx else None,
            "model_sha256": model_sha256,
            "inference_outputs": list(self.manifest.inference_outputs),
            "exported_unix_ms": int(time.time() * 1000),
            "server_eval": None if evaluation is None else {
                "loss": _finite(evaluation.loss), "accuracy": evaluation.accuracy,
                "num_examples": evaluation.num_examples,
            },
        }
        atomic_write_json(out_dir / RECORD_FILE, full, sync_dir=False)
        fsync_dir(out_dir)   # once for both entries, model.onnx and model.json
        if onnx is None:
            return out_dir / RECORD_FILE
        if round >= self.latest_round():
            self.point_latest(round)
        log.info("round %d: exported %s in %.0f ms%s", round, onnx, 1000 * (time.perf_counter() - start),
                 "" if evaluation is None else
                 f" (server eval: loss {evaluation.loss:.4f}"
                 + ("" if evaluation.accuracy is None else f", accuracy {evaluation.accuracy:.4f}") + ")")
        return onnx

    def _write_model(self, path: Path, vector: np.ndarray) -> tuple[Path, str]:
        """model.onnx for `vector`, fsynced (its folder is the caller's), and its sha256: spliced from the
        last ORT export once the parameters' places are known (export_splice), else through ORT."""
        if self._splice is not None:
            digest = hashlib.sha256()

            def hashed(chunks):   # each piece hashed as it is written, while in cache
                for chunk in chunks:
                    digest.update(chunk)
                    yield chunk

            atomic_write(path, hashed(self._splice.chunks(vector)), sync_dir=False)
            return path, digest.hexdigest()
        self._session.from_buffer(vector)
        onnx = self._session.export_model_for_inference(path)
        fsync_file(onnx)
        data = onnx.read_bytes()
        if not self._learned:
            self._learned = True
            self._splice = self._learn_splice(path.parent, vector, data)
        return onnx, hashlib.sha256(data).hexdigest()

    def _learn_splice(self, folder: Path, vector: np.ndarray, exported: bytes) -> ModelSplice | None:
        """Once: ORT's export of the probe vector gives the parameters' places; kept only if it renders
        `exported` (ORT's export of `vector`) byte for byte."""
        probe = folder / ".probe.onnx"
        try:
            self._session.from_buffer(ModelSplice.probe(vector.size))
            splice = ModelSplice.learn(self._session.export_model_for_inference(probe).read_bytes(), vector.size)
        except Exception as e:   # an optimisation only: ORT keeps exporting
            log.warning("per-round export stays with ORT: the probe export failed (%s)", e)
            return None
        finally:
            probe.unlink(missing_ok=True)
            self._session.from_buffer(vector)
        if splice is not None and splice.render(vector) != exported:
            splice = None
        log.info("per-round export: %s", "spliced from here on (export_splice)" if splice else "through ORT (the "
                 "parameters could not be located exactly in the exported model)")
        return splice

    def latest_round(self) -> int:
        try:
            return int(json.loads((self._models / LATEST_JSON).read_text())["round"])
        except (OSError, ValueError, KeyError):
            return 0

    def point_latest(self, round: int) -> None:
        """Atomically move `models/latest.json` and the `models/latest` symlink to round `round`."""
        name = round_name(round)
        atomic_write_json(self._models / LATEST_JSON, {"round": round, "dir": name, "model": f"{name}/{MODEL_FILE}",
                                                       "record": f"{name}/{RECORD_FILE}"}, sync_dir=False)
        tmp = self._models / f".{LATEST_LINK}.tmp-{os.getpid()}"
        try:
            tmp.unlink(missing_ok=True)
            os.symlink(name, tmp)
            os.replace(tmp, self._models / LATEST_LINK)
        except OSError as e:  # e.g. a filesystem without symlinks: latest.json alone is the pointer
            log.debug("could not update the latest symlink: %s", e)
        fsync_dir(self._models)   # once for both renames, latest.json and the symlink


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
