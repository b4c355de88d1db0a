/**
 * onnxruntime-web's training build under Node. Its export map hides `./training` from Node
 * (`"node": null`), so the UMD file is required by path; it runs the same WASM as the browser.
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { OrtTraining } from "./ort-types.js";

export function loadOrtNode(): OrtTraining {
  const require = createRequire(import.meta.url);
  const main = require.resolve("onnxruntime-web"); // .../onnxruntime-web/dist/ort.node.min.js
  const ort = require(join(dirname(main), "ort.training.wasm.min.js")) as OrtTraining;
  ort.env.wasm.numThreads = 1;
  return ort;
}
