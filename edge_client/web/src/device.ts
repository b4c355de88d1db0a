/**
 * `WebDevice`: what `fedort edge run` does, in a browser tab or a Node process — join with a
 * token (keeping the saved client id), fetch and verify the artifacts (cached by sha256), then
 * long-poll tasks until DONE: FIT downloads and verifies the round's global vector, trains
 * (local-trainer.ts), encodes the update (raw, fp16 or int8, as the run allows) and uploads it
 * resumably; EVALUATE reports metrics of the global vector; heartbeats run while it works.
 * Capabilities at Join: runtime=web, codecs=raw,fp16,int8 (a run needing more refuses the Join).
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { allows, encodeUpdate, parseCodec, type CodecSpec } from "./codecs.js";
import { Task_Kind, type JoinReply, type Task } from "./gen/fedort_v1_pb.js";
import { type Arrays, type Artifacts, type InputSpec, LocalTrainer, type Progress } from "./local-trainer.js";
import { CodecError, ProtocolError, UnsupportedError } from "./errors.js";
import { modelId } from "./model-id.js";
import type { OrtTraining } from "./ort-types.js";
import { type Backoff, DEFAULT_BACKOFF, sleep, withRetry } from "./retry.js";
import { type DeviceStore, getText, putText } from "./store.js";
import {
  type CoordinatorClient, downloadArtifact, downloadVector, hex, RPC_TIMEOUT_MS, sha256,
} from "./transport.js";
import { updateHeader } from "./update-header.js";
import { uploadUpdate, type UploadOptions } from "./upload.js";

export const CAPABILITIES = { runtime: "web", codecs: "raw,fp16,int8" } as const;
const ARTIFACT_FILES = ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"] as const;

export interface DeviceData {
  readonly train: Arrays;
  readonly val?: Arrays;
}

export interface DeviceConfig {
  readonly coordinator: string; // names the identity in the store (the base URL)
  readonly name: string;
  readonly token: string;
  readonly codec?: string; // raw (default), fp16, int8, int8:B
  readonly pollWaitMs?: number;
  readonly backoff?: Backoff;
  readonly maxPartBytes?: number;
}

export interface RoundReport {
  readonly round: number;
  readonly kind: "fit" | "evaluate";
  readonly numExamples: number;
  readonly metrics: Record<string, number>;
  readonly outcome: "accepted" | "duplicate" | "rejected";
  readonly codec: string;
  readonly bytesUp: number;
  readonly losses: number[];
}

export type DeviceEvent =
  | { type: "joined"; clientId: string; modelId: string; parameters: number; resumed: boolean }
  | { type: "phase"; phase: string; round?: number }
  | { type: "progress"; round: number; progress: Progress }
  | { type: "upload"; round: number; offset: number; total: number }
  | { type: "report"; report: RoundReport }
  | { type: "retry"; what: string; error: string }
  | { type: "done" };

interface Manifest {
  model_id: string;
  parameter_count: number;
  inputs: InputSpec[];
  files: Record<string, { sha256: string; size: number }>;
}

export class WebDevice {
  clientId = "";
  modelId = "";
  private manifest: Manifest | null = null;
  private trainer: LocalTrainer | null = null;
  private codec: CodecSpec = parseCodec("raw");
  private join: JoinReply | null = null;
  private readonly abort = new AbortController();
  readonly reports: RoundReport[] = [];

  constructor(private readonly client: CoordinatorClient, private readonly ort: OrtTraining,
              private readonly store: DeviceStore, private readonly data: DeviceData,
              private readonly config: DeviceConfig, private readonly onEvent: (e: DeviceEvent) => void = () => {}) {}

  private get backoff(): Backoff {
    return this.config.backoff ?? DEFAULT_BACKOFF;
  }

  private call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    return withRetry(what, fn, this.backoff, this.abort.signal,
      (w, e) => this.onEvent({ type: "retry", what: w, error: String(e) }));
  }

  private callOptions(extraMs = 0): { signal: AbortSignal; timeoutMs: number } {
    return { signal: this.abort.signal, timeoutMs: RPC_TIMEOUT_MS + extraMs };
  }

  private identityKey(): string {
    return `identity|${this.config.coordinator}|${this.config.name}`;
  }

  stop(): void {
    this.abort.abort(new Error("device stopped"));
  }

  /** Join (with the saved client id, if any), fetch the artifacts, open the training session. */
  async start(): Promise<void> {
    const saved = (await getText(this.store, this.identityKey())) ?? "";
    const reply = await this.call("Join", () => this.client.join({
      deviceName: this.config.name, credential: this.config.token, capabilities: { ...CAPABILITIES }, clientId: saved,
    }, this.callOptions()));
    const manifest = JSON.parse(reply.manifestJson) as Manifest;
    const hashed = await modelId(manifest as unknown as Record<string, unknown>);
    if (hashed !== reply.modelId) {
      throw new ProtocolError(`coordinator's manifest hashes to model ${hashed.slice(0, 12)}…, but it announces ${reply.modelId.slice(0, 12)}…`);
    }
    this.join = reply;
    this.clientId = reply.clientId;
    this.modelId = reply.modelId;
    this.manifest = manifest;
    await putText(this.store, this.identityKey(), reply.clientId);
    const configured = parseCodec(this.config.codec ?? "raw");
    this.codec = allows(reply.uploadCodecs, configured) ? configured : parseCodec("raw");
    const artifacts = await this.artifacts(reply, manifest);
    this.trainer = new LocalTrainer(this.ort, artifacts, manifest.inputs);
    const size = await this.trainer.parameterCount();
    if (size !== manifest.parameter_count) {
      throw new ProtocolError(`the artifacts hold ${size} trainable parameters, the manifest says ${manifest.parameter_count}`);
    }
    this.onEvent({ type: "joined", clientId: reply.clientId, modelId: reply.modelId, parameters: size,
                   resumed: saved === reply.clientId });
  }

  private async artifacts(reply: JoinReply, manifest: Manifest): Promise<Artifacts> {
    const files: Record<string, Uint8Array> = {};
    for (const name of ARTIFACT_FILES) {
      const ref = reply.artifacts.find((a) => a.name === name);
      if (ref === undefined) throw new ProtocolError(`coordinator does not announce artifact ${name}`);
      if (manifest.files[name]?.sha256 !== hex(ref.sha256)) {
        throw new ProtocolError(`artifact ${name} is announced with sha256 ${hex(ref.sha256).slice(0, 12)}…, the manifest says otherwise`);
      }
      const key = `artifact|${hex(ref.sha256)}`;
      const cached = await this.store.get(key);
      if (cached !== undefined && hex(await sha256(cached)) === hex(ref.sha256)) {
        files[name] = cached;
        continue;
      }
      this.onEvent({ type: "phase", phase: `downloading ${name}` });
      const bytes = await this.call(`DownloadArtifact ${name}`,
        () => downloadArtifact(this.client, reply.clientId, reply.modelId, name, ref.sha256, this.abort.signal));
      await this.store.put(key, bytes);
      files[name] = bytes;
    }
    return { trainModel: files["training_model.onnx"]!, evalModel: files["eval_model.onnx"]!,
             optimizerModel: files["optimizer_model.onnx"]!, checkpoint: files["checkpoint"]! };
  }

  /** Poll and work until the coordinator says DONE (or `stop()`). */
  async run(): Promise<RoundReport[]> {
    if (this.join === null) await this.start();
    for (;;) {
      this.onEvent({ type: "phase", phase: "polling" });
      const task = await this.poll();
      if (task.kind === Task_Kind.DONE) {
        this.onEvent({ type: "done" });
        return this.reports;
      }
      if (task.kind === Task_Kind.FIT) await this.fit(task);
      else if (task.kind === Task_Kind.EVALUATE) await this.evaluate(task);
      else if (task.retryAfterMs) await sleep(Math.min(task.retryAfterMs, 30_000), this.abort.signal);
    }
  }

  private async poll(): Promise<Task> {
    try {
      return await this.call("PollTask", () => this.client.pollTask(
        { clientId: this.clientId, modelId: this.modelId, waitMs: this.config.pollWaitMs ?? 10_000 },
        this.callOptions(this.config.pollWaitMs ?? 10_000)));
    } catch (e) {
      if (e instanceof ConnectError && e.code === Code.NotFound && e.rawMessage.includes("unknown client")) {
        await this.start(); // the coordinator lost our row: join again as the same device
        return this.poll();
      }
      throw e;
    }
  }

  /** Heartbeats every interval the Join reply names while `work` runs. */
  private async withHeartbeat<T>(work: () => Promise<T>): Promise<T> {
    const interval = this.join?.heartbeatIntervalMs ?? 0;
    if (interval <= 0) return work();
    const timer = setInterval(() => {
      this.client.heartbeat({ clientId: this.clientId }, this.callOptions()).catch(() => undefined); // a missed beat is not an error
    }, interval);
    try {
      return await work();
    } finally {
      clearInterval(timer);
    }
  }

  private async globalVector(task: Task): Promise<{ vector: Float32Array; sha256: Uint8Array }> {
    const length = this.manifest!.parameter_count;
    if (task.vectorLength && Number(task.vectorLength) !== length) {
      throw new ProtocolError(`round ${task.round} vector has ${task.vectorLength} elements, the model ${length}`);
    }
    this.onEvent({ type: "phase", phase: "downloading", round: Number(task.round) });
    return this.call(`DownloadVector round ${task.round}`, () => downloadVector(
      this.client, this.clientId, this.modelId, task.round, length, task.vectorSha256, this.abort.signal));
  }

  private async fit(task: Task): Promise<void> {
    if (task.secagg.length > 0) {
      throw new UnsupportedError(`round ${task.round} uses secure aggregation, which this web client does not implement`);
    }
    const round = Number(task.round);
    const config = task.config;
    if ((config?.proxMu ?? 0) > 0) {
      throw new UnsupportedError(`round ${task.round} trains FedProx (prox_mu=${config?.proxMu}), which this web client does not implement`);
    }
    const result = await this.withHeartbeat(async () => {
      const global = await this.globalVector(task);
      this.onEvent({ type: "phase", phase: "training", round });
      const fit = await this.trainer!.fit(global.vector, this.data.train, {
        epochs: config?.localEpochs ?? 1, batchSize: config?.batchSize ?? 32,
        learningRate: config?.learningRate ?? 0.001, seed: config?.seed ?? 0n,
        resetOptimizer: config?.resetOptimizer ?? true,
      }, this.data.val, (progress) => this.onEvent({ type: "progress", round, progress }));
      return { global, fit };
    });
    const { global, fit } = result;
    let spec = this.codec;
    let payload: Uint8Array;
    try {
      payload = encodeUpdate(spec, fit.vector, global.vector, config?.seed ?? 0n);
    } catch (e) {
      if (!(e instanceof CodecError)) throw e;
      spec = parseCodec("raw"); // e.g. an fp16 overflow: this round goes raw
      payload = encodeUpdate(spec, fit.vector, global.vector, 0n);
    }
    const header = await updateHeader({
      clientId: this.clientId, modelId: this.modelId, round: task.round, spec, payload, length: fit.vector.length,
      globalSha256: global.sha256, numExamples: fit.numExamples, metrics: fit.metrics,
    });
    this.onEvent({ type: "phase", phase: "uploading", round });
    const options: UploadOptions = {
      backoff: this.backoff, signal: this.abort.signal,
      onProgress: (p) => this.onEvent({ type: "upload", round, offset: p.offset, total: p.total }),
      ...(this.config.maxPartBytes !== undefined ? { maxPartBytes: this.config.maxPartBytes } : {}),
    };
    let outcome: RoundReport["outcome"];
    try {
      const reply = await uploadUpdate(this.client, header, payload, options);
      outcome = reply.duplicate ? "duplicate" : reply.accepted ? "accepted" : "rejected";
    } catch (e) {
      if (!(e instanceof ConnectError && e.code === Code.FailedPrecondition)) throw e;
      outcome = "rejected"; // the round closed meanwhile: the update no longer counts
    }
    this.report({ round, kind: "fit", numExamples: fit.numExamples, metrics: fit.metrics, outcome,
                  codec: spec.canonical, bytesUp: payload.length, losses: fit.losses });
  }

  private async evaluate(task: Task): Promise<void> {
    const round = Number(task.round);
    const metrics = await this.withHeartbeat(async () => {
      const global = await this.globalVector(task);
      this.onEvent({ type: "phase", phase: "evaluating", round });
      await this.trainer!.load(global.vector);
      return this.trainer!.evaluate(this.data.val ?? this.data.train, task.config?.batchSize || 32, "val");
    });
    const n = (this.data.val ?? this.data.train).values().next().value?.shape[0] ?? 0;
    const reply = await this.call(`SubmitEvaluation round ${round}`, () => this.client.submitEvaluation({
      clientId: this.clientId, modelId: this.modelId, round: task.round, numExamples: BigInt(n),
      metrics: Object.fromEntries(Object.entries(metrics).map(([k, v]) => [k, { value: v, syncDist: true }])),
    }, this.callOptions()));
    this.report({ round, kind: "evaluate", numExamples: n, metrics, codec: "", bytesUp: 0, losses: [],
                  outcome: reply.duplicate ? "duplicate" : reply.accepted ? "accepted" : "rejected" });
  }

  private report(report: RoundReport): void {
    this.reports.push(report);
    this.onEvent({ type: "report", report });
  }

  async leave(reason: string): Promise<void> {
    if (this.clientId) await this.client.leave({ clientId: this.clientId, reason }, { timeoutMs: RPC_TIMEOUT_MS }).catch(() => undefined);
  }
}
