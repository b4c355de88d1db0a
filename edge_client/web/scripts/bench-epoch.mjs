// Seconds per local epoch of the TypeScript client, under Node and in headless Chromium (benchmarks/bench_web_epoch.py):
//   node scripts/bench-epoch.mjs ARTIFACTS_DIR DATA.npz REPEATS BATCH LR
// Prints {node: [s, ...], chromium: [s, ...]}: each value one epoch (a fit of 1 epoch from the same start, after a warm-up).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { LocalTrainer } from "../dist/lib/local-trainer.js";
import { loadOrtNode } from "../dist/lib/ort-node.js";
import { readDataFile } from "../dist/lib/node-data.js";
import { chromiumMissing, freshBrowser, serveDist } from "../test/browser.mjs";

const [dir, dataPath, repeatsText, batchText, lrText] = process.argv.slice(2);
const repeats = Number(repeatsText);
const settings = { epochs: 1, batchSize: Number(batchText), learningRate: Number(lrText), seed: 0n, resetOptimizer: true };
const names = { trainModel: "training_model.onnx", evalModel: "eval_model.onnx", optimizerModel: "optimizer_model.onnx",
                checkpoint: "checkpoint" };
const artifacts = Object.fromEntries(Object.entries(names).map(([k, f]) => [k, new Uint8Array(readFileSync(join(dir, f)))]));
const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));

async function timeFits(trainer, data) {
  const global = await trainer.parameters();
  await trainer.fit(global, data, settings); // warm-up
  const out = [];
  for (let i = 0; i < repeats; i++) {
    const t = performance.now();
    await trainer.fit(global, data, settings);
    out.push((performance.now() - t) / 1000);
  }
  return out;
}

const data = (await readDataFile(dataPath)).train;
const node = await timeFits(new LocalTrainer(loadOrtNode(), artifacts, manifest.inputs), data);
let chromium = null;
if (!chromiumMissing) {
  const files = Object.fromEntries(Object.entries(artifacts).map(([k, v]) => [`/bench/${k}`, v]));
  const server = await serveDist(files);
  const browser = await freshBrowser();
  try {
    const page = await browser.context.newPage();
    await page.goto(server.url);
    const x = data.get("x");
    const labels = data.get("labels");
    chromium = await page.evaluate(async ({ inputs, settings, repeats, x, xShape, labels }) => {
      const { LocalTrainer } = await import("/lib/local-trainer.js");
      const get = async (k) => new Uint8Array(await (await fetch(`/bench/${k}`)).arrayBuffer());
      const a = { trainModel: await get("trainModel"), evalModel: await get("evalModel"),
                  optimizerModel: await get("optimizerModel"), checkpoint: await get("checkpoint") };
      const arrays = new Map([["x", { dtype: "float32", shape: xShape, data: Float32Array.from(x) }],
                              ["labels", { dtype: "int64", shape: [labels.length], data: BigInt64Array.from(labels, BigInt) }]]);
      const trainer = new LocalTrainer(globalThis.ort, a, inputs);
      const global = await trainer.parameters();
      const s = { ...settings, seed: 0n };
      await trainer.fit(global, arrays, s);
      const out = [];
      for (let i = 0; i < repeats; i++) {
        const t = performance.now();
        await trainer.fit(global, arrays, s);
        out.push((performance.now() - t) / 1000);
      }
      return out;
    }, { inputs: manifest.inputs, settings: { ...settings, seed: 0 }, repeats, x: Array.from(x.data), xShape: x.shape,
         labels: Array.from(labels.data, Number) });
  } finally {
    await browser.close();
    await server.close();
  }
}
process.stdout.write(`${JSON.stringify({ node, chromium })}\n`);
