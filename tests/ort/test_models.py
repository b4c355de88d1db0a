"""Built-in digits models: valid ONNX that ORT 1.19 loads, seeded weights, the documented shapes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from fedort.common.errors import ConfigError
from fedort.ort.models import BUILTIN_MODELS, IR_VERSION, OPSET, builtin_model, cnn, mlp


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_builtin_models_pass_the_checker_with_a_pinned_opset(name):
    model = builtin_model(name)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == OPSET <= 21
    assert model.ir_version == IR_VERSION <= 10


@pytest.mark.parametrize("name", ["cnn", "mlp"])  # the digits models; logreg takes 60 features (below)
def test_builtin_models_map_64_pixels_to_10_logits_in_plain_onnxruntime(name):
    model = builtin_model(name)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"x": np.random.default_rng(0).random((5, 64), dtype=np.float32)})
    assert logits.shape == (5, 10) and logits.dtype == np.float32 and np.isfinite(logits).all()


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_mlp_has_9610_parameters():
    w = _weights(mlp())
    assert {k: v.shape for k, v in w.items()} == {"fc1.weight": (64, 128), "fc1.bias": (128,),
                                                   "fc2.weight": (128, 10), "fc2.bias": (10,)}


def test_cnn_has_its_conv_and_linear_layers():
    w = _weights(cnn())
    assert w["conv1.weight"].shape == (16, 1, 3, 3) and w["fc.weight"].shape == (256, 10)


@pytest.mark.parametrize("factory", [mlp, cnn])
def test_weights_are_reproducible_from_the_seed(factory):
    a, b, c = _weights(factory(seed=3)), _weights(factory(seed=3)), _weights(factory(seed=4))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], c[k]) for k in a)


def test_unknown_builtin_is_a_config_error():
    with pytest.raises(ConfigError, match=r"unknown built-in model 'resnet'; expected one of \['cnn', 'logreg', 'mlp'\]"):
        builtin_model("resnet")


def test_logreg_is_a_60_to_10_linear_model_that_builds_artifacts(tmp_path):
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import builtin_model

    manifest = build_artifacts(builtin_model("logreg"), tmp_path)
    assert manifest.parameter_count == 60 * 10 + 10 and manifest.num_classes == 10
    assert [(s.name, s.shape[1:]) for s in manifest.inputs] == [("x", (60,)), ("labels", ())]
