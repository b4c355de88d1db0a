// Training the built-in MLP's real artifacts with onnxruntime-web under Node.
import assert from "node:assert/strict";
import { test } from "node:test";
import { LocalTrainer } from "../dist/lib/local-trainer.js";
import { loadOrtNode } from "../dist/lib/ort-node.js";
import { blobs, mlpArtifacts } from "./fixtures.mjs";

const settings = { epochs: 5, batchSize: 32, learningRate: 0.01, seed: 3n, resetOptimizer: true };

test("training the MLP under Node lowers the loss epoch by epoch", async () => {
  const { manifest, artifacts } = mlpArtifacts();
  const trainer = new LocalTrainer(loadOrtNode(), artifacts, manifest.inputs);
  const global = await trainer.parameters();
  const result = await trainer.fit(global, blobs(), settings);
  assert.ok(result.losses.at(-1) < result.losses[0] / 2, `losses ${result.losses}`);
  await trainer.release();
});

test("the trained vector has the manifest's parameter count and the data's example count", async () => {
  const { manifest, artifacts } = mlpArtifacts();
  const trainer = new LocalTrainer(loadOrtNode(), artifacts, manifest.inputs);
  const result = await trainer.fit(await trainer.parameters(), blobs(100), { ...settings, epochs: 1 });
  assert.equal(result.vector.length, manifest.parameter_count);
  assert.equal(result.numExamples, 100);
  await trainer.release();
});

test("the same seed trains the same vector; another seed another", async () => {
  const { manifest, artifacts } = mlpArtifacts();
  const trainer = new LocalTrainer(loadOrtNode(), artifacts, manifest.inputs);
  const global = await trainer.parameters();
  const a = await trainer.fit(global, blobs(), { ...settings, epochs: 1 });
  const b = await trainer.fit(global, blobs(), { ...settings, epochs: 1 });
  const c = await trainer.fit(global, blobs(), { ...settings, epochs: 1, seed: 4n });
  assert.deepEqual(a.vector, b.vector);
  assert.notDeepEqual(a.vector, c.vector);
  await trainer.release();
});
