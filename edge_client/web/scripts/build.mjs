// `npm run build`: type-checks (tsc, in the npm script) and writes dist/:
//   dist/lib/**       the client as ES modules (Node imports them; the tests too)
//   dist/node-device.js   the headless device (`node dist/node-device.js --coordinator URL --token T --data F`)
//   dist/index.html, dist/page.js, dist/ort/*   the page the coordinator's web port serves
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
const src = join(root, "src");

function tsFiles(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? tsFiles(path) : path.endsWith(".ts") ? [path] : [];
  });
}

rmSync(dist, { recursive: true, force: true });
await build({
  entryPoints: tsFiles(src).filter((f) => !relative(src, f).startsWith("page")),
  outdir: join(dist, "lib"), outbase: src, format: "esm", platform: "neutral", target: "es2022", logLevel: "warning",
});
await build({
  entryPoints: [join(src, "node-device.ts")], bundle: true, platform: "node", format: "esm", target: "node20",
  outfile: join(dist, "node-device.js"), banner: { js: "#!/usr/bin/env node\nimport { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  external: ["onnxruntime-web"], logLevel: "warning",
});
await build({
  entryPoints: [join(src, "page", "main.ts")], bundle: true, platform: "browser", format: "esm", target: "es2022",
  outfile: join(dist, "page.js"), external: ["onnxruntime-web/training"], logLevel: "warning",
});
mkdirSync(join(dist, "ort"), { recursive: true });
const ortDist = join(root, "node_modules", "onnxruntime-web", "dist");
for (const name of ["ort.training.wasm.min.js", "ort-training-wasm-simd-threaded.wasm", "ort-training-wasm-simd-threaded.mjs"]) {
  copyFileSync(join(ortDist, name), join(dist, "ort", name));
}
for (const name of readdirSync(join(src, "page"))) {
  if (!name.endsWith(".ts")) copyFileSync(join(src, "page", name), join(dist, name));
}
