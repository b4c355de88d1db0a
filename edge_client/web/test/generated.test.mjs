// The committed TypeScript types are what protos/fedort_v1.proto generates today (regenerated offline into a temp dir).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { webRoot } from "./fixtures.mjs";

test("src/gen is current with protos/fedort_v1.proto (npm run generate)", () => {
  const out = mkdtempSync(join(tmpdir(), "fedort-gen-check-"));
  try {
    execFileSync(process.execPath, [join(webRoot, "scripts", "generate.mjs"), "--out", out], { stdio: "pipe" });
    const fresh = readFileSync(join(out, "fedort_v1_pb.ts"), "utf8");
    const committed = readFileSync(join(webRoot, "src", "gen", "fedort_v1_pb.ts"), "utf8");
    assert.ok(fresh === committed, "src/gen/fedort_v1_pb.ts is stale: run `npm run generate` in edge_client/web");
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
