/**
 * The page a person opens on the coordinator's web port: shows the run (Status), reads a local
 * .npz / CSV file or makes a demo shard, and trains in this tab as a device. The device's name
 * and client id live in IndexedDB, so a reloaded tab joins again as the same device.
 * URL parameters (for kiosks and tests): token, name, codec, coordinator, demo=1, autostart=1.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { WebDevice, type DeviceData, type DeviceEvent } from "../device.js";
import { DataError } from "../errors.js";
import { type NdArray, parseCsv, parseNpz } from "../npz.js";
import type { OrtTraining } from "../ort-types.js";
import { getText, IndexedDbStore, putText } from "../store.js";
import { connect } from "../transport.js";

const params = new URLSearchParams(location.search);
const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const ort = (globalThis as unknown as { ort: OrtTraining }).ort;
ort.env.wasm.wasmPaths = new URL("ort/", location.href).href;
ort.env.wasm.numThreads = 1;

const coordinator = params.get("coordinator") ?? location.origin;
const store = new IndexedDbStore();
const events: DeviceEvent[] = [];
(globalThis as unknown as { fedortEvents: DeviceEvent[] }).fedortEvents = events;

function log(line: string): void {
  const el = $("log");
  el.textContent += `${new Date().toLocaleTimeString()}  ${line}\n`;
  el.scrollTop = el.scrollHeight;
}

async function showStatus(): Promise<void> {
  try {
    const s = await connect(coordinator, ($("token") as HTMLInputElement).value).status({});
    $("model").textContent = `${s.modelId.slice(0, 12)}…`;
    $("round").textContent = `${s.currentRound} of ${s.totalRounds}`;
    $("state").textContent = s.state;
    $("devices").textContent = `${s.activeClients} active, ${s.registeredClients} registered`;
    const last = [...s.rounds].reverse().find((r) => r.metrics["val_accuracy"] !== undefined);
    $("accuracy").textContent = last ? `${(100 * last.metrics["val_accuracy"]!).toFixed(1)} % (round ${last.round})` : "–";
  } catch (e) {
    $("state").textContent = e instanceof ConnectError && e.code === Code.Unauthenticated
      ? "enter your device token to see the run"
      : `coordinator unreachable (${(e as Error).message})`;
  }
}

/** A small 10-class, 64-feature shard (Gaussian blobs, seeded) for trying the page without a file. */
function demoShard(rows = 200): Map<string, NdArray> {
  let s = (Math.random() * 2 ** 32) >>> 0;
  const rand = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  const centers = Array.from({ length: 10 }, (_, k) => Array.from({ length: 64 }, (_, j) => Math.sin(k * 7 + j * 3)));
  const x = new Float32Array(rows * 64);
  const labels = new BigInt64Array(rows);
  for (let r = 0; r < rows; r++) {
    const k = Math.floor(rand() * 10);
    labels[r] = BigInt(k);
    for (let j = 0; j < 64; j++) x[r * 64 + j] = centers[k]![j]! + 0.5 * gauss();
  }
  return new Map<string, NdArray>([["x", { dtype: "float32", shape: [rows, 64], data: x }],
                                   ["labels", { dtype: "int64", shape: [rows], data: labels }]]);
}

function split(arrays: Map<string, NdArray>): DeviceData {
  const train = new Map<string, NdArray>();
  const val = new Map<string, NdArray>();
  for (const [k, v] of arrays) (k.startsWith("val_") ? val.set(k.slice(4), v) : train.set(k, v));
  return val.size > 0 ? { train, val } : { train };
}

async function readData(): Promise<DeviceData> {
  const file = ($("file") as HTMLInputElement).files?.[0];
  if (file !== undefined) {
    const bytes = new Uint8Array(await file.arrayBuffer());
    return split(file.name.endsWith(".csv") ? parseCsv(new TextDecoder().decode(bytes), file.name) : parseNpz(bytes, file.name));
  }
  if (($("demo") as HTMLInputElement).checked) return split(demoShard());
  throw new DataError("pick a .npz or CSV file, or tick the demo shard");
}

async function deviceName(): Promise<string> {
  const given = params.get("name");
  if (given) return given;
  const saved = await getText(store, "device-name");
  if (saved) return saved;
  const name = `tab-${crypto.randomUUID().slice(0, 8)}`;
  await putText(store, "device-name", name);
  return name;
}

function onEvent(e: DeviceEvent): void {
  events.push(e);
  if (e.type === "joined") {
    $("client").textContent = `${e.clientId}${e.resumed ? " (resumed)" : ""}`;
    log(`joined as ${e.clientId}, model ${e.modelId.slice(0, 12)}…, ${e.parameters} parameters`);
  } else if (e.type === "phase") {
    $("phase").textContent = e.round !== undefined ? `${e.phase} (round ${e.round})` : e.phase;
  } else if (e.type === "progress") {
    const p = e.progress;
    ($("progress") as HTMLProgressElement).value = (p.epoch * p.batches + p.batch + 1) / (p.epochs * p.batches);
    $("loss").textContent = p.loss.toFixed(4);
  } else if (e.type === "upload") {
    ($("progress") as HTMLProgressElement).value = e.total ? e.offset / e.total : 1;
  } else if (e.type === "report") {
    const r = e.report;
    const m = Object.entries(r.metrics).map(([k, v]) => `${k}=${v.toFixed(4)}`).join(" ");
    log(`round ${r.round} ${r.kind}: ${r.outcome}, ${r.numExamples} examples${r.codec ? `, ${r.codec} ${r.bytesUp} B` : ""} ${m}`);
    void showStatus();
  } else if (e.type === "retry") {
    log(`${e.what}: retrying (${e.error})`);
  } else if (e.type === "done") {
    $("phase").textContent = "done: the run is over";
    log("the coordinator says the run is done");
  }
}

async function start(): Promise<void> {
  ($("start") as HTMLButtonElement).disabled = true;
  try {
    const token = ($("token") as HTMLInputElement).value;
    const data = await readData();
    const device = new WebDevice(connect(coordinator, token), ort, store, data, {
      coordinator, name: await deviceName(), token, codec: ($("codec") as HTMLSelectElement).value,
      pollWaitMs: 5_000,
    }, onEvent);
    await device.run();
  } catch (e) {
    events.push({ type: "phase", phase: `error: ${(e as Error).message}` });
    $("phase").textContent = `error: ${(e as Error).message}`;
    log(`error: ${(e as Error).message}`);
    ($("start") as HTMLButtonElement).disabled = false;
  }
}

($("token") as HTMLInputElement).value = params.get("token") ?? "";
$("token").addEventListener("change", () => void showStatus());
($("codec") as HTMLSelectElement).value = params.get("codec") ?? "raw";
($("demo") as HTMLInputElement).checked = params.get("demo") === "1";
$("start").addEventListener("click", () => void start());
void showStatus();
setInterval(() => void showStatus(), 3000);
if (params.get("autostart") === "1") void start();
