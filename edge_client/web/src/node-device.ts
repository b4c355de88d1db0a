/**
 * A headless device under Node 20+:
 *   node dist/node-device.js --coordinator http://HOST:PORT --token T --data client.npz
 *     [--name N] [--codec raw|fp16|int8] [--cache DIR] [--max-part-bytes B]
 * Prints one JSON line per event (joined, report, done) on stdout.
 */
import { parseArgs } from "node:util";
import { homedir, hostname } from "node:os";
import { join } from "node:path";
import { WebDevice } from "./device.js";
import { FolderStore } from "./folder-store.js";
import { readDataFile } from "./node-data.js";
import { loadOrtNode } from "./ort-node.js";
import { connect } from "./transport.js";

const { values } = parseArgs({
  options: {
    coordinator: { type: "string" }, token: { type: "string", default: process.env.FEDORT_TOKEN ?? "" },
    data: { type: "string" }, name: { type: "string", default: `node-${hostname()}` },
    codec: { type: "string", default: "raw" }, cache: { type: "string", default: join(homedir(), ".cache", "fedort-web") },
    "max-part-bytes": { type: "string" }, "poll-wait-ms": { type: "string", default: "10000" },
  },
});
if (!values.coordinator || !values.data) {
  console.error("usage: node dist/node-device.js --coordinator http://HOST:PORT --token T --data FILE.npz");
  process.exit(2);
}
const device = new WebDevice(
  connect(values.coordinator, values.token ?? ""), loadOrtNode(), new FolderStore(values.cache!), await readDataFile(values.data),
  {
    coordinator: values.coordinator, name: values.name!, token: values.token ?? "", codec: values.codec!,
    pollWaitMs: Number(values["poll-wait-ms"]),
    ...(values["max-part-bytes"] ? { maxPartBytes: Number(values["max-part-bytes"]) } : {}),
  },
  (e) => {
    if (e.type === "joined" || e.type === "report" || e.type === "done" || e.type === "retry") {
      process.stdout.write(`${JSON.stringify(e)}\n`);
    }
  });
process.on("SIGTERM", () => device.stop());
try {
  await device.run();
} catch (e) {
  console.error(`fedort web device: ${(e as Error).message}`);
  process.exit(1);
}
