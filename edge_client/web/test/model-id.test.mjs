// The model id is computed as the Python side computes it (protos/PROTOCOL.md section 4).
import assert from "node:assert/strict";
import { test } from "node:test";
import { canonicalJson, modelId } from "../dist/lib/model-id.js";
import { mlpArtifacts } from "./fixtures.mjs";

test("the built-in MLP's manifest hashes to the model id the Python builder wrote into it", async () => {
  const { manifest } = mlpArtifacts();
  assert.equal(await modelId(manifest), manifest.model_id);
});

test("a changed manifest hashes to another id", async () => {
  const { manifest } = mlpArtifacts();
  assert.notEqual(await modelId({ ...manifest, parameter_count: manifest.parameter_count + 1 }), manifest.model_id);
});

test("canonical JSON sorts keys, drops spaces and escapes non-ASCII as Python's json.dumps does", () => {
  assert.equal(canonicalJson({ b: [1, null, true], a: "é\n" }), '{"a":"\\u00e9\\n","b":[1,null,true]}');
});
