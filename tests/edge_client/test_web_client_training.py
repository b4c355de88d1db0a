"""The TypeScript client's local training (onnxruntime-web under Node) is the Python device's: same global vector,
data, seed, batch size and learning rate give the same trained vector (same shuffles, same steps), up to float
rounding of two builds of the same kernels."""

import subprocess

import numpy as np
import pytest

from fedort.edge_client.training import local_round
from fedort.ort.artifacts import Manifest
from fedort.common.client_data import ClientData
from fedort.ort.session import TrainingSession
from fedort.protos.messages import TrainConfig
from web_client import WEB, node_or_skip, web_build

pytestmark = pytest.mark.slow  # Node runs the TypeScript client

SCRIPT = """
import { readFileSync, writeFileSync } from "node:fs";
import { LocalTrainer } from "%(lib)s/local-trainer.js";
import { loadOrtNode } from "%(lib)s/ort-node.js";
import { readDataFile } from "%(lib)s/node-data.js";
const [dir, data, globalFile, out, lr, seed] = process.argv.slice(2);
const read = (n) => new Uint8Array(readFileSync(`${dir}/${n}`));
const manifest = JSON.parse(readFileSync(`${dir}/manifest.json`, "utf8"));
const trainer = new LocalTrainer(loadOrtNode(), { trainModel: read("training_model.onnx"), evalModel: read("eval_model.onnx"),
  optimizerModel: read("optimizer_model.onnx"), checkpoint: read("checkpoint") }, manifest.inputs);
const global = new Float32Array(new Uint8Array(readFileSync(globalFile)).buffer);
const fit = await trainer.fit(global, (await readDataFile(data)).train,
  { epochs: 2, batchSize: 32, learningRate: Number(lr), seed: BigInt(seed), resetOptimizer: true });
writeFileSync(out, new Uint8Array(fit.vector.buffer));
"""


def _ts_fit(tmp_path, artifacts, data, global_vector, lr, seed):
    node = node_or_skip()
    lib = web_build() / "lib"
    (tmp_path / "global.f32").write_bytes(global_vector.astype("<f4").tobytes())
    script = tmp_path / "fit.mjs"
    script.write_text(SCRIPT % {"lib": lib.as_posix()})
    subprocess.run([node, str(script), str(artifacts), str(data), str(tmp_path / "global.f32"), str(tmp_path / "ts.f32"),
                    repr(lr), str(seed)], check=True, cwd=WEB, timeout=120, capture_output=True)
    return np.fromfile(tmp_path / "ts.f32", dtype="<f4")


def _py_fit(artifacts, data, global_vector, lr, seed):
    session = TrainingSession.from_artifacts(artifacts)
    manifest = Manifest.from_json((artifacts / "manifest.json").read_text())
    cfg = TrainConfig(local_epochs=2, batch_size=32, learning_rate=lr, seed=seed, reset_optimizer=True)
    return local_round.fit(session, global_vector, ClientData.load(data), manifest.inputs, cfg).vector


def test_typescript_training_matches_python_training(tmp_path, mlp_artifacts, digits_train):
    data = tmp_path / "shard.npz"
    np.savez(data, x=digits_train["x"][:150], labels=digits_train["labels"][:150])
    global_vector = TrainingSession.from_artifacts(mlp_artifacts).to_buffer()
    py = _py_fit(mlp_artifacts, data, global_vector, 0.01, 3)
    ts = _ts_fit(tmp_path, mlp_artifacts, data, global_vector, 0.01, 3)
    moved = np.abs(py - global_vector).max()
    assert moved > 1e-2
    assert np.abs(ts - py).max() < 1e-3 * moved


def test_typescript_training_with_another_seed_differs_from_python(tmp_path, mlp_artifacts, digits_train):
    data = tmp_path / "shard.npz"
    np.savez(data, x=digits_train["x"][:150], labels=digits_train["labels"][:150])
    global_vector = TrainingSession.from_artifacts(mlp_artifacts).to_buffer()
    py = _py_fit(mlp_artifacts, data, global_vector, 0.01, 3)
    ts = _ts_fit(tmp_path, mlp_artifacts, data, global_vector, 0.01, 4)
    assert np.abs(ts - py).max() > 1e-3 * np.abs(py - global_vector).max()
