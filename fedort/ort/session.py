"""`TrainingSession`: one on-device training session over ONNX Runtime's training API.

The Python counterpart of ORT's mobile `ORTTrainingSession`: train/eval steps, gradient reset,
optimizer step, a linear LR schedule, the flat trainable-parameter vector (`to_buffer` /
`from_buffer`) and export of a pruned inference model. It is the only module that talks to
`onnxruntime.training.api`, so a port to another ORT release touches this file and `_training_api.py`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

import numpy as np
import onnxruntime as ort

from fedort.common.buffer_pool import BufferPool
from fedort.common.errors import ArtifactError, ConfigError, TrainingError, VectorError
from fedort.common.invariants import present
from fedort.edge_client.training.step_inputs import StepInputs
from fedort.ort import _training_api as _ort
from fedort.ort.artifacts import (
    CHECKPOINT,
    EVAL_MODEL,
    OPTIMIZER_MODEL,
    TRAINING_MODEL,
    Manifest,
    TensorSpec,
    load_manifest,
)
from fedort.ort.lr_schedule import linear_scheduler, scheduler_counts
from fedort.ort.scratch import ScratchDir
from fedort.ort.session_config import SessionConfig

PathOrBytes = Union[str, os.PathLike, bytes]


def _ort_error(action: str, e: Exception) -> TrainingError:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return TrainingError(f"{action} failed in ONNX Runtime: {msg}")


class TrainingSession:
    """Training over ORT artifacts: a checkpoint, a training model, and optional eval/optimizer models.

    Create it with `TrainingSession.from_artifacts(folder)` or from explicit paths (or bytes) of
    each file. Inputs to the steps are numpy arrays in input-name order, labels last for the
    built-in losses; outputs come back as a dict keyed by output name. Files ORT wants on disk (models
    given as bytes, the checkpoint `reset_optimizer_state` reloads) go to a folder of the session's own
    under `scratch_dir` (default: fedort's cache root's `sessions/`; see `fedort.ort.scratch`).
    """

    def __init__(
        self,
        checkpoint: str | os.PathLike,
        training_model: PathOrBytes,
        eval_model: PathOrBytes | None = None,
        optimizer_model: PathOrBytes | None = None,
        *,
        config: SessionConfig | None = None,
        session_options: ort.SessionOptions | None = None,
        manifest: Manifest | None = None,
        scratch_dir: str | os.PathLike | None = None,
    ) -> None:
        self._api = _ort.training_api()
        self._config = config or SessionConfig()
        self._scratch = ScratchDir(scratch_dir)
        self._training_path = present(
            self._materialize(training_model, "training_model", required=True), "the training model"
        )
        self._eval_path = self._materialize(eval_model, "eval_model")
        self._optimizer_path = self._materialize(optimizer_model, "optimizer_model")
        self._checkpoint_path = Path(checkpoint)
        if not self._checkpoint_path.exists():
            raise ArtifactError(f"checkpoint not found: {checkpoint}")
        self._session_options = session_options or self._config.session_options()
        self._device = self._config.device()
        self.manifest = manifest
        self._scheduler = None
        self._schedule: tuple[int, int, float] | None = None
        self._buffers: BufferPool | None = None  # recycle_buffers(): to_buffer's arrays reused
        self._load(self._checkpoint_path)
        self._input_specs = self._read_input_specs()
        self._input_checks = StepInputs(self._input_specs)  # every step's inputs, checked before ORT sees them

    @classmethod
    def from_artifacts(cls, folder: str | os.PathLike, **kwargs) -> TrainingSession:
        """Open the artifacts in `folder` (as written by `fedort artifacts build`)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise ArtifactError(f"artifacts folder not found: {folder}")
        manifest = load_manifest(folder) if (folder / "manifest.json").exists() else None
        optimizer = folder / OPTIMIZER_MODEL
        evaluation = folder / EVAL_MODEL
        return cls(
            folder / CHECKPOINT,
            folder / TRAINING_MODEL,
            evaluation if evaluation.exists() else None,
            optimizer if optimizer.exists() else None,
            manifest=manifest,
            **kwargs,
        )

    # ---- construction helpers -------------------------------------------------------------

    def _materialize(self, model: PathOrBytes | None, name: str, required: bool = False) -> Path | None:
        """ORT's training Module loads models from paths only; bytes go to a file in the session's folder."""
        if model is None:
            if required:
                raise ArtifactError(f"{name} is required")
            return None
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            path = self._scratch.file(name + (".ort" if data[4:8] == b"ORTM" else ".onnx"))
            path.write_bytes(data)
            return path
        path = Path(model)
        if not path.is_file():
            raise ArtifactError(f"{name} not found: {path}")
        return path

    def _load(self, checkpoint: Path) -> None:
        api = self._api
        try:
            self._state = api.CheckpointState.load_checkpoint(os.fspath(checkpoint))
            self._module = api.Module(
                os.fspath(self._training_path),
                self._state,
                os.fspath(self._eval_path) if self._eval_path else None,
                device=self._device,
                session_options=self._session_options,
            )
            self._optimizer = (
                api.Optimizer(os.fspath(self._optimizer_path), self._module) if self._optimizer_path else None
            )
        except Exception as e:
            raise ArtifactError(f"could not load training artifacts ({checkpoint}, {self._training_path}): {e}") from e
        self._module.train()
        self._train_inputs = tuple(self._module.input_names())
        self._train_outputs = tuple(self._module.output_names())
        if self._eval_path:
            self._module.eval()
            self._eval_inputs = tuple(self._module.input_names())
            self._eval_outputs = tuple(self._module.output_names())
            self._module.train()
        else:
            self._eval_inputs, self._eval_outputs = (), ()
        self._param_count = {t: self._module.get_parameters_size(t) for t in (True, False)}
        if self._schedule is not None:
            self.register_linear_lr_scheduler(*self._schedule)

    def _read_input_specs(self) -> dict[str, TensorSpec]:
        if self.manifest is not None:
            return {s.name: s for s in self.manifest.inputs}
        path = self._eval_path or self._training_path
        if path.suffix == ".ort":
            return {}
        import onnx  # only here (no manifest): a session over manifested artifacts never loads onnx

        graph = onnx.load(os.fspath(path), load_external_data=False).graph
        return {vi.name: TensorSpec.from_value_info(vi) for vi in graph.input}

    # ---- names ------------------------------------------------------------------------------

    @property
    def train_input_names(self) -> tuple[str, ...]:
        return self._train_inputs

    @property
    def eval_input_names(self) -> tuple[str, ...]:
        return self._eval_inputs

    @property
    def train_output_names(self) -> tuple[str, ...]:
        return self._train_outputs

    @property
    def eval_output_names(self) -> tuple[str, ...]:
        return self._eval_outputs

    @property
    def input_specs(self) -> dict[str, TensorSpec]:
        """Declared dtype and shape of each input, by name (empty for `.ort` models without a manifest)."""
        return dict(self._input_specs)

    # ---- steps ------------------------------------------------------------------------------

    def train_step(self, *inputs: np.ndarray, check: bool = True) -> dict[str, np.ndarray]:
        """One forward + backward pass; gradients accumulate until `lazy_reset_grad`.

        `check=False` skips the per-step dtype/shape checks, for C-contiguous batches the caller
        has already validated (the Trainer checks whole arrays once, up front).
        """
        arrays = self._input_checks.check(inputs, self._train_inputs, "train_step") if check else inputs
        if not self._module.training:
            self._module.train()
        try:
            out = self._module(*arrays)
        except Exception as e:
            raise _ort_error("train_step", e) from e
        return self._named(out, self._train_outputs)

    def eval_step(self, *inputs: np.ndarray) -> dict[str, np.ndarray]:
        """One forward pass of the eval model (no gradients)."""
        if not self._eval_path:
            raise ArtifactError("eval_step needs an eval model; this session was created without one")
        arrays = self._input_checks.check(inputs, self._eval_inputs, "eval_step")
        self._module.eval()
        try:
            out = self._module(*arrays)
        except Exception as e:
            raise _ort_error("eval_step", e) from e
        finally:
            self._module.train()
        return self._named(out, self._eval_outputs)

    @staticmethod
    def _named(out, names: Sequence[str]) -> dict[str, np.ndarray]:
        values = out if isinstance(out, (list, tuple)) else (out,)
        return dict(zip(names, values))

    def lazy_reset_grad(self) -> None:
        """Zero the gradients before the next train_step (lazily, as ORT does)."""
        self._module.lazy_reset_grad()

    def optimizer_step(self) -> None:
        """Apply the accumulated gradients with the optimizer model."""
        optimizer = self._require_optimizer("optimizer_step")
        try:
            optimizer.step()
        except Exception as e:
            raise _ort_error("optimizer_step", e) from e

    def _require_optimizer(self, what: str) -> Any:
        """The ORT optimizer (ArtifactError naming `what` if this session has none)."""
        if self._optimizer is None:
            raise ArtifactError(f"{what} needs an optimizer model; this session was created without one")
        return self._optimizer

    # ---- learning rate ----------------------------------------------------------------------

    @property
    def learning_rate(self) -> float:
        return float(self._require_optimizer("learning_rate").get_learning_rate())

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        optimizer = self._require_optimizer("learning_rate")
        if not (value >= 0 and np.isfinite(value)):
            raise ConfigError(f"learning rate must be a finite number >= 0, got {value}")
        optimizer.set_learning_rate(float(value))
        # A fixed rate replaces any registered schedule (ORT: don't mix set_learning_rate and a
        # scheduler); otherwise reset_optimizer_state would bring the old schedule back.
        self._scheduler = None
        self._schedule = None

    def register_linear_lr_scheduler(
        self,
        warmup_step_count: int | None = None,
        total_step_count: int | None = None,
        initial_lr: float | None = None,
        **old_names: int,
    ) -> None:
        """Linear warmup from 0 to `initial_lr` over `warmup_step_count` optimizer steps, then linear
        decay to 0 at `total_step_count`; the parameter names are ORT's `LinearLRScheduler`'s.

        `warmup_steps=` / `total_steps=` (this method's former names) still work, with a DeprecationWarning.
        """
        warmup, total = scheduler_counts(warmup_step_count, total_step_count, old_names)
        if initial_lr is None:
            raise TypeError("register_linear_lr_scheduler() missing required argument: 'initial_lr'")
        optimizer = self._require_optimizer("register_linear_lr_scheduler")
        self._scheduler = linear_scheduler(self._api, optimizer, warmup, total, float(initial_lr))
        self._schedule = (warmup, total, float(initial_lr))

    def scheduler_step(self) -> None:
        """Advance the registered LR schedule by one optimizer step."""
        if self._scheduler is None:
            raise ConfigError("scheduler_step called before register_linear_lr_scheduler")
        self._scheduler.step()

    # ---- parameters -------------------------------------------------------------------------

    def parameter_count(self, trainable_only: bool = True) -> int:
        return self._param_count[trainable_only]

    def recycle_buffers(self, keep: int) -> None:
        """Let `to_buffer` reuse up to `keep` arrays once nothing else refers to them (fedort.common.buffer_pool):
        for a host of many clients sharing this session; 0 (the default) gives a fresh array every time."""
        self._buffers = BufferPool(keep) if keep > 0 else None

    def to_buffer(self, trainable_only: bool = True) -> np.ndarray:
        """The parameters as one flat float32 vector (the caller's own array), in the training model's parameter order.

        One copy, straight into a fresh numpy array (or a recycled one, `recycle_buffers`) that ORT writes
        through an OrtValue sharing its memory (what `Module.get_contiguous_parameters` does into an ORT-allocated
        buffer, which `.numpy()` would then copy again)."""
        n = self._param_count[trainable_only]
        out = self._buffers.take(n) if self._buffers is not None else np.empty(n, dtype=np.float32)
        copy = getattr(getattr(self._module, "_model", None), "copy_parameters_to_buffer", None)
        if copy is None:  # not the Module layout of onnxruntime-training 1.19: its public (two-copy) call
            return self._module.get_contiguous_parameters(trainable_only).numpy().reshape(-1)
        try:
            copy(ort.OrtValue.ortvalue_from_numpy(out)._ortvalue, trainable_only)
        except Exception as e:
            raise _ort_error("copy the parameters out", e) from e
        return out

    def from_buffer(self, vector: np.ndarray, trainable_only: bool = True) -> None:
        """Load a flat float32 vector (as made by `to_buffer`) into the parameters."""
        expected = self._param_count[trainable_only]
        kind = "trainable" if trainable_only else "all"
        if not isinstance(vector, np.ndarray):
            raise VectorError(f"from_buffer takes a numpy float32 array, got {type(vector).__name__}")
        if vector.dtype != np.float32:
            raise VectorError(f"parameter vector must be float32, got {vector.dtype}")
        if vector.ndim != 1:
            raise VectorError(f"parameter vector must be 1-D, got shape {vector.shape}")
        if vector.shape[0] != expected:
            raise VectorError(
                f"parameter vector must have {expected} elements ({kind} parameters), got {vector.shape[0]}"
            )
        # a float64 sum of float32 values cannot overflow, so it is finite exactly when every value is
        if not np.isfinite(vector.sum(dtype=np.float64)):
            bad = int(np.count_nonzero(~np.isfinite(vector)))
            raise VectorError(
                f"parameter vector has {bad} non-finite values (NaN or inf); expected finite float32 values"
            )
        value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(vector))
        try:
            self._module.copy_buffer_to_parameters(value._ortvalue, trainable_only)
        except Exception as e:
            raise _ort_error("from_buffer", e) from e

    # ---- persistence ------------------------------------------------------------------------

    def export_model_for_inference(self, path: str | os.PathLike, output_names: Sequence[str] | None = None) -> Path:
        """Write a pruned inference model (eval graph up to `output_names`) that plain onnxruntime loads."""
        if not self._eval_path:
            raise ArtifactError("export needs the eval model; this session was created without one")
        if self._eval_path.suffix == ".ort":
            raise ArtifactError("export needs the .onnx eval model; ORT cannot export from an .ort eval model")
        names = list(output_names or (self.manifest.inference_outputs if self.manifest else ()))
        if not names:
            raise ConfigError("export_model_for_inference needs the graph output names to keep")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)  # a missing folder gives ORT's "SystemError : 2"
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            self._module.export_model_for_inferencing(os.fspath(tmp), names)
            os.replace(tmp, path)
        except Exception as e:
            tmp.unlink(missing_ok=True)
            raise _ort_error(f"export to {path} with outputs {names}", e) from e
        return path

    def save_checkpoint(self, path: str | os.PathLike, include_optimizer_state: bool = False) -> Path:
        """Save parameters (and, if asked, optimizer moments and step) to `path`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._api.CheckpointState.save_checkpoint(self._state, os.fspath(path), include_optimizer_state)
        except Exception as e:
            raise _ort_error(f"save_checkpoint to {path}", e) from e
        return path

    def reset_optimizer_state(self) -> None:
        """Forget optimizer moments and step count, keeping the current parameters.

        Federated rounds usually start each round's local training from fresh optimizer state
        (the moments belong to the previous global model). ORT keeps them inside the
        checkpoint state, so we reload a checkpoint without them (saved once per session, in its
        own folder) and put every current parameter back (`from_buffer` of all of them).
        """
        self._require_optimizer("reset_optimizer_state")
        lr = self.learning_rate
        fresh = self._scratch.file("no-optimizer-state.ckpt")
        if not fresh.is_file():
            self.save_checkpoint(fresh, include_optimizer_state=False)
        params = np.array(self.to_buffer(trainable_only=False), dtype=np.float32, copy=True)
        self._load(fresh)
        self.from_buffer(params, trainable_only=False)
        if self._schedule is None:
            self.learning_rate = lr
