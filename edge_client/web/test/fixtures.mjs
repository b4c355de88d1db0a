// Shared test fixtures: the built-in MLP's real artifacts (built by the Python CLI) and a small data set.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const webRoot = resolve(fileURLToPath(import.meta.url), "..", "..");
export const repoRoot = resolve(webRoot, "..", "..");

/** The fedort CLI: $FEDORT_CLI, else the repository's .venv. */
export function fedortCli() {
  const cli = process.env.FEDORT_CLI ?? join(repoRoot, ".venv", "bin", "fedort");
  if (!existsSync(cli)) throw new Error(`fedort CLI not found at ${cli}; set FEDORT_CLI or run make .venv/.installed`);
  return cli;
}

let built;
/** {dir, manifest, files} of the built-in MLP's artifacts, built once per test process. */
export function mlpArtifacts() {
  if (built) return built;
  const root = mkdtempSync(join(tmpdir(), "fedort-web-mlp-"));
  process.on("exit", () => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, "mlp");
  execFileSync(fedortCli(), ["artifacts", "build", "--builtin", "mlp", "--out", dir], { stdio: "ignore" });
  const read = (name) => new Uint8Array(readFileSync(join(dir, name)));
  built = {
    dir, manifest: JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")),
    artifacts: { trainModel: read("training_model.onnx"), evalModel: read("eval_model.onnx"),
                 optimizerModel: read("optimizer_model.onnx"), checkpoint: read("checkpoint") },
  };
  return built;
}

/** A separable 10-class, 64-feature data set (deterministic). */
export function blobs(rows = 256, seed = 1) {
  let s = seed >>> 0;
  const rand = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  const x = new Float32Array(rows * 64);
  const labels = new BigInt64Array(rows);
  for (let r = 0; r < rows; r++) {
    const k = r % 10;
    labels[r] = BigInt(k);
    for (let j = 0; j < 64; j++) x[r * 64 + j] = Math.sin(k * 7 + j * 3) + 0.3 * (rand() - 0.5);
  }
  return new Map([["x", { dtype: "float32", shape: [rows, 64], data: x }],
                  ["labels", { dtype: "int64", shape: [rows], data: labels }]]);
}
