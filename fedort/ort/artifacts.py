"""Training artifacts: build them from an ONNX model, describe them in a manifest, load them.

An artifacts folder holds ORT's four files (`training_model.onnx`, `eval_model.onnx`,
`optimizer_model.onnx`, `checkpoint`) and `manifest.json`. The manifest records each file's
sha256, the length of the trainable parameter vector and the model's inputs and outputs; the
hash of its content is the **model id** that everything on the wire names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fedort.common.errors import ArtifactError, ConfigError
from fedort.ort import _training_api as _ort

if TYPE_CHECKING:  # onnx loads only where artifacts are built: a client that reads them needs none
    import onnx

MANIFEST = "manifest.json"
TRAINING_MODEL = "training_model.onnx"
EVAL_MODEL = "eval_model.onnx"
OPTIMIZER_MODEL = "optimizer_model.onnx"
CHECKPOINT = "checkpoint"
ARTIFACT_FILES = (TRAINING_MODEL, EVAL_MODEL, OPTIMIZER_MODEL, CHECKPOINT)

LOSSES = {"cross-entropy": "CrossEntropyLoss", "mse": "MSELoss", "bce-with-logits": "BCEWithLogitsLoss", "l1": "L1Loss"}
OPTIMIZERS = {"adamw": "AdamW", "sgd": "SGD"}

# onnx.TensorProto's element types (fixed numbers of the ONNX spec) -> numpy dtype names
_ONNX_DTYPES = {1: "float32", 11: "float64", 7: "int64", 6: "int32", 10: "float16", 9: "bool", 2: "uint8", 3: "int8"}


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: name, numpy dtype name, shape (None for a symbolic dim)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]

    @classmethod
    def from_value_info(cls, vi: onnx.ValueInfoProto) -> TensorSpec:
        t = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        return cls(vi.name, _ONNX_DTYPES.get(t.elem_type, str(t.elem_type)), dims)


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    """What a set of artifacts is; `model_id` is the sha256 of everything else in it."""

    files: dict[str, FileEntry]
    parameter_count: int
    dtype: str
    inputs: tuple[TensorSpec, ...]  # eval model inputs (features first, labels last)
    train_outputs: tuple[str, ...]
    eval_outputs: tuple[str, ...]
    inference_outputs: tuple[str, ...]  # graph outputs the exported inference model keeps
    trainable: tuple[str, ...]
    frozen: tuple[str, ...]
    loss: str
    optimizer: str
    opset: int
    # classes of a cross-entropy model (last dim of its scores); labels must lie in 0..num_classes-1.
    # None: unknown (another loss, a symbolic dim, or a manifest written before it was recorded).
    num_classes: int | None = None
    model_id: str = ""

    def content(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("model_id")
        if d["num_classes"] is None:  # older manifests lack the key: keep their model ids
            d.pop("num_classes")
        return d

    def with_id(self) -> Manifest:
        blob = json.dumps(self.content(), sort_keys=True, separators=(",", ":")).encode()
        return dataclasses.replace(self, model_id=hashlib.sha256(blob).hexdigest())

    def to_json(self) -> str:
        return json.dumps({**self.content(), "model_id": self.model_id}, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            d = json.loads(text)
            m = cls(
                files={k: FileEntry(**v) for k, v in d["files"].items()},
                parameter_count=int(d["parameter_count"]),
                dtype=d["dtype"],
                inputs=tuple(TensorSpec(i["name"], i["dtype"], tuple(i["shape"])) for i in d["inputs"]),
                train_outputs=tuple(d["train_outputs"]),
                eval_outputs=tuple(d["eval_outputs"]),
                inference_outputs=tuple(d["inference_outputs"]),
                trainable=tuple(d["trainable"]),
                frozen=tuple(d["frozen"]),
                loss=d["loss"],
                optimizer=d["optimizer"],
                opset=int(d["opset"]),
                num_classes=None if d.get("num_classes") is None else int(d["num_classes"]),
            ).with_id()
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"manifest is not a fedort manifest: {e}") from e
        if d.get("model_id") and d["model_id"] != m.model_id:
            raise ArtifactError(f"manifest content hashes to {m.model_id}, but it claims model id {d['model_id']}")
        return m

    @property
    def feature_inputs(self) -> tuple[TensorSpec, ...]:
        """Inputs the inference model takes (the eval inputs minus loss labels)."""
        return self.inputs[: len(self.inputs) - self.label_count]

    @property
    def label_count(self) -> int:
        return 1 if self.loss != "none" else 0

    @property
    def class_labels(self) -> tuple[str, int] | None:
        """(label input name, class count) when the labels are class ids the data must keep in range."""
        if self.num_classes is None or not self.label_count:
            return None
        return self.inputs[-1].name, self.num_classes


def load_manifest(folder: str | os.PathLike) -> Manifest:
    """Read `folder/manifest.json` (ArtifactError if missing or malformed)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ArtifactError(f"no {MANIFEST} in {folder}: build artifacts with `fedort artifacts build`")
    return Manifest.from_json(path.read_text())


def verify_artifacts(folder: str | os.PathLike, manifest: Manifest | None = None) -> Manifest:
    """Check every file in `folder` against the manifest's sha256; returns the manifest."""
    manifest = manifest or load_manifest(folder)
    for name, entry in manifest.files.items():
        path = Path(folder) / name
        if not path.is_file():
            raise ArtifactError(f"artifact {name} missing from {folder}")
        digest = sha256_file(path)
        if digest != entry.sha256:
            raise ArtifactError(
                f"artifact {path} is corrupt: sha256 {digest[:12]}…, manifest says {entry.sha256[:12]}…"
            )
    return manifest


def _float_initializers(model: onnx.ModelProto) -> list[str]:
    import onnx

    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    return [t.name for t in model.graph.initializer if t.data_type in floats]


def build_artifacts(
    model: onnx.ModelProto | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    loss: str = "cross-entropy",
    optimizer: str = "adamw",
    trainable: Sequence[str] | None = None,
    frozen: Sequence[str] | None = None,
    inference_outputs: Sequence[str] | None = None,
) -> Manifest:
    """Generate ORT training artifacts for `model` in `out_dir` (created) and write the manifest.

    `trainable` defaults to every float initializer not listed in `frozen`. The model's graph
    outputs (or `inference_outputs`) are added as extra outputs of the train/eval models, so
    `eval_step` returns them beside the loss and the export can keep them.
    """
    import onnx

    if loss not in LOSSES:
        raise ConfigError(f"unknown loss {loss!r}; expected one of {sorted(LOSSES)}")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZERS)}")
    if not isinstance(model, onnx.ModelProto):
        if not Path(model).is_file():
            raise ConfigError(f"ONNX model file not found: {model}")
        try:
            model = onnx.load(os.fspath(model))
        except Exception as e:  # onnx raises DecodeError and friends
            raise ConfigError(f"{model} is not an ONNX model: {e}") from e
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset > 21:
        raise ConfigError(
            f"model uses opset {opset}; ONNX Runtime 1.19 supports opset <= 21 (re-export with opset 21 or lower)"
        )
    if model.ir_version > 10:
        raise ConfigError(f"model has IR version {model.ir_version}; ONNX Runtime 1.19 loads IR <= 10")

    floats = _float_initializers(model)
    frozen = list(frozen or [])
    unknown = sorted(set(frozen) - set(floats))
    if trainable is None:
        trainable = [n for n in floats if n not in frozen]
    else:
        trainable = list(trainable)
        unknown += sorted(set(trainable) - set(floats))
        frozen = frozen or [n for n in floats if n not in trainable]
    if unknown:
        raise ConfigError(f"not float initializers of the model: {unknown}; expected names among {floats}")
    if not trainable:
        raise ConfigError("no trainable parameters: the model has no float initializers left to train")
    graph_outputs = [o.name for o in model.graph.output]
    inference_outputs = list(inference_outputs or graph_outputs)
    missing = [
        n for n in inference_outputs if n not in graph_outputs and n not in {v.name for v in model.graph.value_info}
    ]
    if missing:
        raise ConfigError(f"inference outputs {missing} are not outputs of the model; expected among {graph_outputs}")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)  # ORT fails with "SystemError : 2" on a missing folder
    art = _ort.artifacts_api()
    with tempfile.TemporaryDirectory(dir=out, prefix=".build-") as tmp:
        _ort.reset_graph_names()  # same model -> same bytes and model id, whatever was built before
        with _ort.quiet_native_stderr():
            art.generate_artifacts(
                model,
                requires_grad=trainable,
                frozen_params=frozen,
                loss=getattr(art.LossType, LOSSES[loss]),
                optimizer=getattr(art.OptimType, OPTIMIZERS[optimizer]),
                artifact_directory=tmp,
                # keep the model's outputs visible beside the loss, for metrics and for export
                additional_output_names=inference_outputs,
            )
        _name_loss_output(Path(tmp))
        for name in ARTIFACT_FILES:
            os.replace(Path(tmp) / name, out / name)

    eval_model = onnx.load(os.fspath(out / EVAL_MODEL), load_external_data=False)
    params = {t.name for t in model.graph.initializer}
    names = _user_names(out)
    manifest = Manifest(
        files={n: FileEntry(sha256_file(out / n), (out / n).stat().st_size) for n in ARTIFACT_FILES},
        parameter_count=names["parameter_count"],
        dtype="float32",
        inputs=tuple(TensorSpec.from_value_info(vi) for vi in eval_model.graph.input if vi.name not in params),
        train_outputs=names["train_outputs"],
        eval_outputs=names["eval_outputs"],
        inference_outputs=tuple(inference_outputs),
        trainable=tuple(trainable),
        frozen=tuple(frozen),
        loss=loss,
        optimizer=optimizer,
        opset=opset,
        num_classes=_num_classes(model, loss),
    ).with_id()
    tmp_manifest = out / (MANIFEST + ".tmp")
    tmp_manifest.write_text(manifest.to_json())
    os.replace(tmp_manifest, out / MANIFEST)
    return manifest


#: what the loss output of the training and eval models is called (onnxblock names it `onnx::loss::2`)
LOSS_OUTPUT = "loss"


def _name_loss_output(folder: Path) -> None:
    """Rename the loss output of the generated training and eval models to `loss` (unless the
    user's graph already has a tensor of that name), so metrics and code read a stable name."""
    import onnx

    for file in (TRAINING_MODEL, EVAL_MODEL):
        model = onnx.load(os.fspath(folder / file), load_external_data=False)
        graph = model.graph
        old = graph.output[0].name
        taken = (
            {n for node in graph.node for n in (*node.input, *node.output)}
            | {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
            | {t.name for t in graph.initializer}
        )
        if old == LOSS_OUTPUT or LOSS_OUTPUT in taken:
            continue
        for node in graph.node:
            node.input[:] = [LOSS_OUTPUT if n == old else n for n in node.input]
            node.output[:] = [LOSS_OUTPUT if n == old else n for n in node.output]
        for value in (*graph.output, *graph.value_info):
            if value.name == old:
                value.name = LOSS_OUTPUT
        onnx.save(model, os.fspath(folder / file))


def _num_classes(model: onnx.ModelProto, loss: str) -> int | None:
    """The class count of a cross-entropy model: the static last dim of the scores ORT's loss reads.

    ORT's CrossEntropyLoss takes the model's first graph output as the scores [..., C].
    """
    if loss != "cross-entropy" or not model.graph.output:
        return None
    dims = model.graph.output[0].type.tensor_type.shape.dim
    if not dims or not dims[-1].HasField("dim_value") or dims[-1].dim_value < 1:
        return None
    return int(dims[-1].dim_value)


def _user_names(folder: Path) -> dict:
    """Ask ORT itself for the user-facing outputs and the trainable vector length."""
    api = _ort.training_api()
    state = api.CheckpointState.load_checkpoint(os.fspath(folder / CHECKPOINT))
    module = api.Module(os.fspath(folder / TRAINING_MODEL), state, os.fspath(folder / EVAL_MODEL))
    train_outputs = tuple(module.output_names())
    module.eval()
    return {
        "train_outputs": train_outputs,
        "eval_outputs": tuple(module.output_names()),
        "parameter_count": int(module.get_parameters_size(True)),
    }


def copy_artifacts(src: str | os.PathLike, dst: str | os.PathLike) -> Manifest:
    """Copy a verified artifacts folder (used to pin the coordinator's own copy)."""
    manifest = verify_artifacts(src)
    Path(dst).mkdir(parents=True, exist_ok=True)
    for name in (*ARTIFACT_FILES, MANIFEST):
        shutil.copy2(Path(src) / name, Path(dst) / name)
    return manifest
