// The client in a real headless Chromium: training the MLP's artifacts with onnxruntime-web, and IndexedDB across a reload.
import assert from "node:assert/strict";
import { test } from "node:test";
import { chromiumMissing, freshBrowser, serveDist } from "./browser.mjs";
import { mlpArtifacts } from "./fixtures.mjs";

test("the MLP trains in Chromium: the loss falls and the vector has the manifest's length",
  { skip: chromiumMissing, timeout: 120_000 }, async () => {
    const { manifest, artifacts } = mlpArtifacts();
    const files = Object.fromEntries(Object.entries(artifacts).map(([k, v]) => [`/artifacts/${k}`, v]));
    const server = await serveDist(files);
    const browser = await freshBrowser();
    try {
      const page = await browser.context.newPage();
      await page.goto(server.url);
      const result = await page.evaluate(async (inputs) => {
        const { LocalTrainer } = await import("/lib/local-trainer.js");
        const get = async (k) => new Uint8Array(await (await fetch(`/artifacts/${k}`)).arrayBuffer());
        const artifacts = { trainModel: await get("trainModel"), evalModel: await get("evalModel"),
                            optimizerModel: await get("optimizerModel"), checkpoint: await get("checkpoint") };
        const rows = 256;
        const x = new Float32Array(rows * 64);
        const labels = new BigInt64Array(rows);
        for (let r = 0; r < rows; r++) {
          labels[r] = BigInt(r % 10);
          for (let j = 0; j < 64; j++) x[r * 64 + j] = Math.sin((r % 10) * 7 + j * 3) + 0.1 * Math.cos(r * j);
        }
        const data = new Map([["x", { dtype: "float32", shape: [rows, 64], data: x }],
                              ["labels", { dtype: "int64", shape: [rows], data: labels }]]);
        const trainer = new LocalTrainer(globalThis.ort, artifacts, inputs);
        const fit = await trainer.fit(await trainer.parameters(), data,
          { epochs: 5, batchSize: 32, learningRate: 0.01, seed: 3n, resetOptimizer: true });
        return { losses: fit.losses, length: fit.vector.length };
      }, manifest.inputs);
      assert.equal(result.length, manifest.parameter_count);
      assert.ok(result.losses.at(-1) < result.losses[0] / 2, `losses ${result.losses}`);
    } finally {
      await browser.close();
      await server.close();
    }
  });

test("what the device stores in IndexedDB is there after the tab reloads", { skip: chromiumMissing, timeout: 60_000 },
  async () => {
    const server = await serveDist();
    const browser = await freshBrowser();
    try {
      const page = await browser.context.newPage();
      await page.goto(server.url);
      await page.evaluate(async () => {
        const { IndexedDbStore, putText } = await import("/lib/store.js");
        await putText(new IndexedDbStore(), "identity|test", "client-123");
      });
      await page.reload();
      const value = await page.evaluate(async () => {
        const { IndexedDbStore, getText } = await import("/lib/store.js");
        return getText(new IndexedDbStore(), "identity|test");
      });
      assert.equal(value, "client-123");
    } finally {
      await browser.close();
      await server.close();
    }
  });
