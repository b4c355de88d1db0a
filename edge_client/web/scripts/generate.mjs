// Regenerates the TypeScript message and service types from protos/fedort_v1.proto:
//   npm run generate                  (writes src/gen/)
//   node scripts/generate.mjs --out DIR [--protos DIR]   (the staleness test writes into a temp dir)
// Uses the buf CLI and protoc-gen-es from node_modules, offline.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..");
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? resolve(args[i + 1]) : fallback;
};
const out = option("--out", join(root, "src", "gen"));
const protos = option("--protos", resolve(root, "..", "..", "protos"));

const template = {
  version: "v2",
  plugins: [{ local: join(root, "node_modules", ".bin", "protoc-gen-es"), out, opt: ["target=ts"] }],
};
const work = mkdtempSync(join(tmpdir(), "fedort-gen-"));
try {
  const templateFile = join(work, "buf.gen.yaml");
  writeFileSync(templateFile, JSON.stringify(template));
  rmSync(out, { recursive: true, force: true });
  execFileSync(join(root, "node_modules", ".bin", "buf"),
    ["generate", protos, "--path", join(protos, "fedort_v1.proto"), "--template", templateFile],
    { stdio: "inherit", cwd: work, env: { ...process.env, BUF_CACHE_DIR: join(work, "cache") } });
} finally {
  rmSync(work, { recursive: true, force: true });
}
