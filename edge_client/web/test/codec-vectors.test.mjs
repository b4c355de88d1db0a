// The TypeScript codecs and NumPy streams against protos/testdata/codec_vectors.json (made by the Python codecs).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { encodeUpdate, parseCodec } from "../dist/lib/codecs.js";
import { NumpyGenerator } from "../dist/lib/numpy-random.js";
import { toBinary } from "@bufbuild/protobuf";
import { UpdateHeaderSchema } from "../dist/lib/gen/fedort_v1_pb.js";
import { updateHeader } from "../dist/lib/update-header.js";

const vectors = JSON.parse(readFileSync(new URL("../../../protos/testdata/codec_vectors.json", import.meta.url)));
const f32 = (hex) => new Float32Array(new Uint8Array(Buffer.from(hex, "hex")).buffer);
const hex = (bytes) => Buffer.from(bytes).toString("hex");

for (const c of vectors.codecs) {
  test(`codec ${c.name} (${c.codec}) encodes the Python bytes`, () => {
    const payload = encodeUpdate(parseCodec(c.codec), f32(c.trained), f32(c.global), BigInt(c.seed));
    assert.equal(hex(payload), c.payload);
  });
}

for (const c of vectors.codecs) {
  test(`codec ${c.name}: the update header serializes to the Python bytes`, async () => {
    const h = vectors.header;
    const global = f32(c.global);
    const globalSha256 = new Uint8Array(await crypto.subtle.digest("SHA-256", global));
    const header = await updateHeader({
      clientId: h.client_id, modelId: h.model_id, round: BigInt(h.round), spec: parseCodec(c.codec),
      payload: new Uint8Array(Buffer.from(c.payload, "hex")), length: c.length, globalSha256,
      numExamples: h.num_examples, metrics: h.metrics,
    });
    assert.equal(hex(toBinary(UpdateHeaderSchema, header)), c.update_header);
  });
}

for (const r of vectors.random) {
  test(`default_rng(${r.seed}).random() draws NumPy's doubles`, () => {
    const rng = new NumpyGenerator(r.seed.map(BigInt));
    const values = new Float64Array(6).map(() => rng.random());
    assert.equal(hex(new Uint8Array(values.buffer)), r.values);
  });
}

for (const s of vectors.shuffles) {
  test(`default_rng(${s.seed}).permutation(${s.n}) per epoch matches NumPy`, () => {
    const rng = new NumpyGenerator(BigInt(s.seed));
    for (const epoch of s.epochs) assert.deepEqual(Array.from(rng.permutation(s.n)), epoch);
  });
}
