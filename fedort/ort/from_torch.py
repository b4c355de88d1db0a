"""From a PyTorch module to fedort training artifacts: `torch.onnx.export`, then `build_artifacts`.

ONNX Runtime's on-device training starts from an exported ONNX graph; this module does that
export the way ORT 1.19 can train it (opset 17, IR ≤ 10, every parameter and buffer its own named initializer,
no constant folding into them, a symbolic batch dimension) and hands the graph to the same
`build_artifacts` as `fedort artifacts build --model`, with the same loss / optimizer / frozen
options. Parameters keep their PyTorch names (`fc1.weight`), so a `state_dict` and the flat
vector line up. Only artifact building needs torch (the `fedort[torch]` extra); devices never do.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import io
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedort.common.errors import ConfigError
from fedort.common.extras import require
from fedort.common.invariants import present

if TYPE_CHECKING:
    import onnx
    import torch

    from fedort.ort.artifacts import Manifest

#: the opset of the export: ORT 1.19 trains opset <= 21; 17 is what the built-in models use
OPSET = 17
#: ORT 1.19 loads IR <= 10
MAX_IR_VERSION = 10


def _as_tuple(example_inputs: Any) -> tuple:
    return tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)


def export_torch(
    module: torch.nn.Module,
    example_inputs: Any,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_batch: bool = True,
) -> onnx.ModelProto:
    """`module` as an ONNX model ORT 1.19 can train: opset 17, IR <= 10, every parameter and
    buffer an initializer under its PyTorch name, dim 0 of every input and output symbolic (`batch`)
    unless `dynamic_batch` is False. Input names default to `x` (`x0, x1, ...` for several),
    output names to `logits` (`out0, out1, ...`).

    The graph is the module's eval-mode graph: ORT's training and eval models are built from one
    forward graph and never write BatchNorm's running statistics back, so dropout is left out and
    BatchNorm normalises with its running statistics (frozen buffers) while its scale and shift train.
    """
    require("torch", "building artifacts from a PyTorch module")
    import onnx
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"expected a torch.nn.Module, got {type(module).__name__}")
    inputs = _as_tuple(example_inputs)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ConfigError("example_inputs must be a tensor or a tuple of tensors (one batch the module accepts)")
    was_training = module.training
    module.eval()  # the exported graph is the eval-mode one; a train-mode forward would move BatchNorm's statistics
    try:
        with torch.no_grad():
            outputs = _as_tuple(module(*inputs))
    finally:
        module.train(was_training)
    input_names = list(input_names or (["x"] if len(inputs) == 1 else [f"x{i}" for i in range(len(inputs))]))
    output_names = list(output_names or (["logits"] if len(outputs) == 1 else [f"out{i}" for i in range(len(outputs))]))
    if len(input_names) != len(inputs):
        raise ConfigError(f"{len(input_names)} input names for {len(inputs)} example inputs")
    if len(output_names) != len(outputs):
        raise ConfigError(f"{len(output_names)} output names for the module's {len(outputs)} outputs")
    buf = io.BytesIO()
    dynamic = {n: {0: "batch"} for n in (*input_names, *output_names)} if dynamic_batch else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notes are no news to the user
            torch.onnx.export(
                module,
                inputs,
                buf,
                opset_version=OPSET,
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic,
                export_params=True,
                do_constant_folding=False,
                training=torch.onnx.TrainingMode.EVAL,
                # initializers as graph inputs: the exporter then skips its pass that merges initializers of
                # equal values (two zero-initialised biases, BatchNorm's running mean and bias), which would
                # then train as one; they are taken out of the inputs again below
                keep_initializers_as_inputs=True,
                **_torchscript_exporter(torch),
            )
    except Exception as e:  # the exporter raises many kinds; the message is what the user needs
        raise ConfigError(f"torch.onnx.export failed for {type(module).__name__}: {e}") from e
    finally:
        module.train(was_training)
    model = onnx.load_from_string(buf.getvalue())
    initializers = {t.name for t in model.graph.initializer}
    features = [i for i in model.graph.input if i.name not in initializers]
    del model.graph.input[:]
    model.graph.input.extend(features)
    if model.ir_version > MAX_IR_VERSION:
        model.ir_version = MAX_IR_VERSION  # opset 17 needs nothing of a later IR
    _expose_layer_norm_statistics(model)
    return model


def _torchscript_exporter(torch) -> dict:
    """`dynamo=False` where torch has the flag (2.5 on; the default from 2.9): the TorchScript-based
    exporter writes the requested opset and keeps parameter names, without onnxscript."""
    import inspect

    return {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


def _expose_layer_norm_statistics(model: onnx.ModelProto) -> None:
    """Give every LayerNormalization node its optional Mean and InvStdDev outputs.

    The exporter emits the node with its one required output; ORT's gradient builder for it reads
    the saved statistics (outputs 1 and 2) and fails on a node without them.
    """
    for node in model.graph.node:
        if node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            node.output.extend([f"{node.output[0]}.mean", f"{node.output[0]}.inv_std_dev"])


def artifacts_from_torch(
    module: torch.nn.Module,
    example_inputs: Any,
    out_dir: str | os.PathLike,
    *,
    loss: str = "cross-entropy",
    optimizer: str = "adamw",
    trainable: Sequence[str] | None = None,
    frozen: Sequence[str] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_batch: bool = True,
) -> Manifest:
    """Export `module` (see `export_torch`) and build its training artifacts in `out_dir`.

    Trained by default: the module's parameters with `requires_grad`; buffers (BatchNorm's running
    statistics) and parameters with `requires_grad=False` are frozen. `trainable` / `frozen` name
    parameters as `module.named_parameters()` does and replace that choice, as with `--model`.
    The loss is appended to the first output; its output is named `loss`.
    """
    from fedort.ort.artifacts import build_artifacts

    model = export_torch(
        module, example_inputs, input_names=input_names, output_names=output_names, dynamic_batch=dynamic_batch
    )
    initializers = {t.name for t in model.graph.initializer}
    floats = _float_initializers(model)
    unknown = sorted((set(frozen or ()) | set(trainable or ())) - set(floats))
    if unknown:
        raise ConfigError(f"not parameters of the exported graph: {unknown}; expected names among {floats}")
    if trainable is None:
        trainable = [n for n, p in module.named_parameters() if p.requires_grad and n not in set(frozen or ())]
        lost = [n for n in trainable if n not in initializers]
        if lost:
            raise ConfigError(
                f"parameters {lost} are not initializers of the exported graph (unused by forward, or "
                "folded by the exporter); freeze them or remove them from the module"
            )
    # everything else stays fixed: buffers such as BatchNorm's running statistics, frozen parameters
    frozen = [n for n in floats if n not in set(trainable)]
    return build_artifacts(model, out_dir, loss=loss, optimizer=optimizer, trainable=trainable, frozen=frozen)


def _float_initializers(model: onnx.ModelProto) -> list[str]:
    import onnx

    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    return [t.name for t in model.graph.initializer if t.data_type in floats]


def load_factory(spec: str) -> tuple[torch.nn.Module, Any]:
    """`FILE.py:FACTORY` -> what `FACTORY()` returns: `(module, example_inputs)`.

    The factory is a function of no arguments defined in FILE.py (imported as a fresh module) that
    returns the `torch.nn.Module` and one batch of example inputs (a tensor or a tuple of tensors).
    """
    require("torch", "fedort artifacts build --torch")
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise ConfigError(
            f"--torch takes FILE.py:FACTORY (a function returning (module, example_inputs)), got {spec!r}"
        )
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"--torch: file not found: {path}")
    module_name = f"_fedort_torch_factory_{abs(hash(str(path.resolve())))}"
    loader = importlib.machinery.SourceFileLoader(module_name, str(path))
    spec_obj = importlib.util.spec_from_loader(module_name, loader)
    mod = importlib.util.module_from_spec(present(spec_obj, f"a module spec for {path}"))
    sys.modules[module_name] = mod  # dataclasses and pickling look the module up by name
    try:
        loader.exec_module(mod)
    except Exception as e:
        raise ConfigError(f"--torch: importing {path} failed: {type(e).__name__}: {e}") from e
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise ConfigError(f"--torch: {path} has no function {name!r}")
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise ConfigError(f"--torch: {name}() must return (module, example_inputs), got {type(made).__name__}")
    return made
