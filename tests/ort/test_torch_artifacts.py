"""From a real torch.nn.Module to artifacts, a federation and an exported model that agrees with it.

Marked `torch`: skipped where PyTorch is not importable (`make test`'s environment); `.ci/torch.sh`
runs them in an environment of their own with the pinned CPU build.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from fedort import artifacts_from_torch  # noqa: E402
from fedort.ort.artifacts import load_manifest# noqa: E402
from fedort.simulations.config import SimulationConfig  # noqa: E402
from fedort.simulations.data.datasets import TEST_FILE, client_file_name, save_npz, subset  # noqa: E402
from fedort.simulations.runner import run_simulation  # noqa: E402


class DigitsNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def _net(seed: int = 0) -> DigitsNet:
    torch.manual_seed(seed)
    return DigitsNet()


def _client_folder(folder, train, test, clients: int = 3):
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(train["labels"])), clients)):
        save_npz(folder / client_file_name(i), subset(train, part))
    save_npz(folder / TEST_FILE, test)
    return folder


def test_a_federation_trained_from_a_torch_module_exports_a_model_that_agrees_with_the_module(
        tmp_path, digits_train, digits_test):
    net = _net()
    manifest = artifacts_from_torch(net, torch.zeros(8, 64), tmp_path / "art")
    data = _client_folder(tmp_path / "data", digits_train, digits_test)
    result = run_simulation(SimulationConfig(artifacts=tmp_path / "art", data=data, rounds=3, batch_size=32,
                                             lr=0.01, progress=False, workers=1, out=tmp_path / "run"))
    assert manifest.trainable == tuple(name for name, _ in net.named_parameters())
    assert result.final["test_accuracy"] > 0.8
    exported = onnx.load(str(result.model))
    trained = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in exported.graph.initializer
               if t.name in dict(net.named_parameters())}
    assert set(trained) == set(manifest.trainable)
    assert not torch.equal(trained["fc1.weight"], net.fc1.weight.detach())   # the federation moved the weights
    net.load_state_dict(trained)
    x = digits_test["x"][:64]
    served = ort.InferenceSession(str(result.model), providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})[0]
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)


def test_the_loss_output_is_named_loss_and_parameters_keep_their_torch_names(tmp_path):
    manifest = artifacts_from_torch(_net(), torch.zeros(2, 64), tmp_path / "art")
    assert manifest.train_outputs == ("loss", "logits")
    assert manifest.eval_outputs == ("loss", "logits")
    assert manifest.trainable == ("fc1.weight", "fc1.bias", "norm.weight", "norm.bias", "fc2.weight", "fc2.bias")
    assert (manifest.opset, manifest.num_classes) == (17, 10)


def test_buffers_and_parameters_without_grad_are_frozen(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 10))
    net[0].weight.requires_grad_(False)
    manifest = artifacts_from_torch(net, torch.zeros(4, 64), tmp_path / "art")
    assert "0.weight" in manifest.frozen and "1.running_mean" in manifest.frozen
    assert manifest.trainable == ("0.bias", "1.weight", "1.bias", "2.weight", "2.bias")


def test_frozen_names_the_torch_parameters_kept_fixed(tmp_path):
    manifest = artifacts_from_torch(_net(), torch.zeros(2, 64), tmp_path / "art", loss="cross-entropy",
                                    optimizer="sgd", frozen=["fc1.weight", "fc1.bias"])
    assert manifest.trainable == ("norm.weight", "norm.bias", "fc2.weight", "fc2.bias")
    assert set(manifest.frozen) == {"fc1.weight", "fc1.bias"} and manifest.optimizer == "sgd"


def test_the_cli_builds_artifacts_from_a_factory_in_a_python_file(tmp_path):
    (tmp_path / "net.py").write_text(textwrap.dedent("""
        import torch

        def make():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.ReLU(), torch.nn.Linear(8, 10)), torch.zeros(2, 64)
    """))
    done = subprocess.run([sys.executable, "-m", "fedort", "artifacts", "build", "--torch", f"{tmp_path / 'net.py'}:make",
                           "--out", str(tmp_path / "art"), "--loss", "cross-entropy"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert load_manifest(tmp_path / "art").trainable == ("0.weight", "0.bias", "2.weight", "2.bias")


def test_exporting_leaves_the_modules_mode_and_batchnorm_statistics_as_they_were(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 10)).train()
    before = net[1].running_mean.clone()
    artifacts_from_torch(net, torch.randn(8, 64), tmp_path / "art")
    assert net.training and torch.equal(net[1].running_mean, before)


def test_parameters_that_hold_equal_values_stay_separate_parameters(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 10))
    with torch.no_grad():
        net[0].bias.zero_()
        net[1].bias.zero_()   # same shape, same values: still two parameters to train
    manifest = artifacts_from_torch(net.eval(), torch.zeros(4, 64), tmp_path / "art")
    assert manifest.trainable == tuple(name for name, _ in net.named_parameters())
    assert manifest.parameter_count == sum(p.numel() for p in net.parameters())
