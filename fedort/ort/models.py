"""Built-in ONNX models: `mlp` and `cnn` for the bundled digits, `logreg` for Synthetic(α, β).

Built with `onnx.helper`, so no torch is needed anywhere. The digits models take
`x: float32[batch, 64]` (8x8 images flattened), `logreg` takes `x: float32[batch, 60]` (the
FedProx paper's synthetic features); all return `logits: float32[batch, 10]`. Weights are
He-initialised from a seed so artifacts are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fedort.common.errors import ConfigError

#: ORT 1.19.2 runs opset <= 21; onnx 1.17 would default to 22, so we always say which.
OPSET = 17
IR_VERSION = 9

DIGITS_FEATURES = 64
DIGITS_CLASSES = 10
SYNTHETIC_FEATURES = 60


def _he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _finish(nodes, initializers, name: str, features: int = DIGITS_FEATURES) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", DIGITS_CLASSES])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fedort")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def mlp(hidden: int = 128, seed: int = 0) -> onnx.ModelProto:
    """64 -> hidden -> ReLU -> 10."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(_he(rng, (DIGITS_FEATURES, hidden), DIGITS_FEATURES), "fc1.weight"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "fc1.bias"),
        numpy_helper.from_array(_he(rng, (hidden, DIGITS_CLASSES), hidden), "fc2.weight"),
        numpy_helper.from_array(np.zeros(DIGITS_CLASSES, np.float32), "fc2.bias"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["fc1.mm"]),
        helper.make_node("Add", ["fc1.mm", "fc1.bias"], ["fc1.out"]),
        helper.make_node("Relu", ["fc1.out"], ["relu1"]),
        helper.make_node("MatMul", ["relu1", "fc2.weight"], ["fc2.mm"]),
        helper.make_node("Add", ["fc2.mm", "fc2.bias"], ["logits"]),
    ]
    return _finish(nodes, inits, "digits_mlp")


def cnn(channels: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Reshape to 1x8x8 -> conv3x3(channels) -> ReLU -> maxpool2 -> linear(channels*16 -> 10)."""
    rng = np.random.default_rng(seed)
    flat = channels * 4 * 4
    inits = [
        numpy_helper.from_array(np.array([-1, 1, 8, 8], np.int64), "image_shape"),
        numpy_helper.from_array(np.array([-1, flat], np.int64), "flat_shape"),
        numpy_helper.from_array(_he(rng, (channels, 1, 3, 3), 9), "conv1.weight"),
        numpy_helper.from_array(np.zeros(channels, np.float32), "conv1.bias"),
        numpy_helper.from_array(_he(rng, (flat, DIGITS_CLASSES), flat), "fc.weight"),
        numpy_helper.from_array(np.zeros(DIGITS_CLASSES, np.float32), "fc.bias"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "image_shape"], ["image"]),
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1.out"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1.out"], ["relu1"]),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["pool1", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc.weight"], ["fc.mm"]),
        helper.make_node("Add", ["fc.mm", "fc.bias"], ["logits"]),
    ]
    return _finish(nodes, inits, "digits_cnn")


def logreg(features: int = SYNTHETIC_FEATURES, seed: int = 0) -> onnx.ModelProto:
    """Multinomial logistic regression, 60 -> 10 (softmax cross-entropy comes with the artifacts).

    The FedProx paper's model for Synthetic(α, β): logits = x W + b.
    """
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(_he(rng, (features, DIGITS_CLASSES), features) * np.float32(0.5), "fc.weight"),
        numpy_helper.from_array(np.zeros(DIGITS_CLASSES, np.float32), "fc.bias"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "fc.weight"], ["fc.mm"]),
        helper.make_node("Add", ["fc.mm", "fc.bias"], ["logits"]),
    ]
    return _finish(nodes, inits, "synthetic_logreg", features)


BUILTIN_MODELS: dict[str, Callable[..., onnx.ModelProto]] = {"mlp": mlp, "cnn": cnn, "logreg": logreg}


def builtin_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The built-in model called `name` (one of BUILTIN_MODELS)."""
    try:
        factory = BUILTIN_MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown built-in model {name!r}; expected one of {sorted(BUILTIN_MODELS)}") from None
    return factory(seed=seed)
