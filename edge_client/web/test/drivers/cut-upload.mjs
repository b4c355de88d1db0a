// A Node device whose link drops during its upload, for the end-to-end tests:
//   node test/drivers/cut-upload.mjs URL TOKEN DATA.npz CACHE_DIR MAX_PART_BYTES CUT_PART MODE
// The CUT_PART-th PutUploadPart (1-based) fails once: MODE "request" drops it before it reaches the coordinator,
// "response" lets the coordinator take it and drops the answer, "expire" holds it back until the upload's
// expires_unix_ms has passed (the coordinator then has dropped the upload). Prints one JSON line:
// {reports, parts, partBytes, payloadBytes, cut} where partBytes counts every payload byte put on the wire.
import { fromBinary } from "@bufbuild/protobuf";
import { WebDevice } from "../../dist/lib/device.js";
import { FolderStore } from "../../dist/lib/folder-store.js";
import { UploadPartRequestSchema, UploadStateSchema } from "../../dist/lib/gen/fedort_v1_pb.js";
import { readDataFile } from "../../dist/lib/node-data.js";
import { loadOrtNode } from "../../dist/lib/ort-node.js";
import { connect } from "../../dist/lib/transport.js";

const [url, token, data, cache, maxPart, cutPart, mode] = process.argv.slice(2);
const stats = { parts: 0, partBytes: 0, payloadBytes: 0, cut: false };
let expires = 0;
const cuttingFetch = async (input, init) => {
  if (!String(input).endsWith("/PutUploadPart")) return fetch(input, init);
  const part = fromBinary(UploadPartRequestSchema, new Uint8Array(init.body));
  stats.parts += 1;
  const cutNow = stats.parts === Number(cutPart) && !stats.cut;
  if (cutNow && mode === "request") {
    stats.cut = true;
    throw new TypeError("network cut (request lost)");
  }
  if (cutNow && mode === "expire") {
    stats.cut = true;
    while (Date.now() <= expires) await new Promise((r) => setTimeout(r, Math.max(1, expires + 1 - Date.now())));
  }
  stats.partBytes += part.data.length;
  const response = await fetch(input, init);
  if (response.ok) expires = Number(fromBinary(UploadStateSchema, new Uint8Array(await response.clone().arrayBuffer())).expiresUnixMs);
  if (cutNow && mode === "response") {
    stats.cut = true;
    await response.arrayBuffer();
    throw new TypeError("network cut (answer lost)");
  }
  return response;
};
const device = new WebDevice(connect(url, token, cuttingFetch), loadOrtNode(), new FolderStore(cache),
  await readDataFile(data), {
    coordinator: url, name: "cut", token, codec: "raw", pollWaitMs: 1000, maxPartBytes: Number(maxPart),
    backoff: { initialMs: 50, multiplier: 2, maxDelayMs: 500, giveUpAfterMs: 60_000 },
  }, (e) => { if (e.type === "upload") stats.payloadBytes = e.total; });
const reports = await device.run();
process.stdout.write(`${JSON.stringify({ reports, ...stats })}\n`);
