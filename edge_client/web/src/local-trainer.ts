/**
 * On-device work of one task over onnxruntime-web's training API, as the Python device does it
 * (edge_client/training/local_round.py, trainer.py): load the global vector, train E epochs in batches,
 * each epoch shuffled by `default_rng(seed).permutation(n)` (the same permutations as NumPy),
 * one optimizer step and a lazy gradient reset per batch, then the trainable parameters.
 *
 * Learning rate: the web build has no setter, so the optimizer runs at the rate its artifacts
 * start with (`baseLearningRate`), and a step at the task's rate is taken as
 * p + (lr / base) * (p' - p): AdamW's and SGD's steps are linear in the rate for the state they
 * have, so this is the task's step up to float32 rounding.
 */
import { DataError, TrainingError } from "./errors.js";
import type { NdArray } from "./npz.js";
import { NumpyGenerator } from "./numpy-random.js";
import type { OrtTraining, Tensor, TrainingSession } from "./ort-types.js";

export interface InputSpec {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly (number | null)[];
}

export interface Artifacts {
  readonly checkpoint: Uint8Array;
  readonly trainModel: Uint8Array;
  readonly evalModel: Uint8Array;
  readonly optimizerModel: Uint8Array;
}

export interface TrainSettings {
  readonly epochs: number;
  readonly batchSize: number; // 0: the whole data set in one batch
  readonly learningRate: number;
  readonly seed: bigint;
  readonly resetOptimizer: boolean;
}

export interface FitResult {
  readonly vector: Float32Array;
  readonly numExamples: number;
  readonly metrics: Record<string, number>;
  readonly losses: number[]; // the mean training loss of each epoch
}

export interface Progress {
  readonly epoch: number;
  readonly epochs: number;
  readonly batch: number;
  readonly batches: number;
  readonly loss: number;
}

/** Data as the model takes it: arrays by input name, one row per example. */
export type Arrays = ReadonlyMap<string, NdArray>;

/** The learning rate ORT's optimizer starts from when nothing sets one. */
export const DEFAULT_BASE_LEARNING_RATE = Math.fround(0.001);

function rows(arrays: Arrays, names: readonly string[]): number {
  const counts = names.map((n) => {
    const a = arrays.get(n);
    if (a === undefined) throw new DataError(`data lacks array ${n}; the model's inputs are ${names.join(", ")}`);
    return a.shape[0] ?? 0;
  });
  if (counts.some((c) => c !== counts[0])) throw new DataError(`arrays ${names.join(", ")} have different row counts ${counts}`);
  return counts[0] ?? 0;
}

export class LocalTrainer {
  private session: TrainingSession | null = null;

  constructor(private readonly ort: OrtTraining, private readonly artifacts: Artifacts,
              private readonly inputs: readonly InputSpec[], readonly baseLearningRate = DEFAULT_BASE_LEARNING_RATE) {}

  /** A session with fresh optimizer state (ORT keeps the moments inside its checkpoint state). */
  async reset(): Promise<TrainingSession> {
    if (this.session !== null) await this.session.release();
    this.session = await this.ort.TrainingSession.create({
      checkpointState: this.artifacts.checkpoint, trainModel: this.artifacts.trainModel,
      evalModel: this.artifacts.evalModel, optimizerModel: this.artifacts.optimizerModel,
    });
    return this.session;
  }

  private async ready(): Promise<TrainingSession> {
    return this.session ?? this.reset();
  }

  async parameterCount(): Promise<number> {
    return (await this.ready()).getParametersSize(true);
  }

  async load(vector: Float32Array): Promise<void> {
    const session = await this.ready();
    await session.loadParametersBuffer(new Uint8Array(vector.buffer, vector.byteOffset, vector.byteLength), true);
  }

  async parameters(): Promise<Float32Array> {
    const tensor = (await (await this.ready()).getContiguousParameters(true)) as Tensor;
    return Float32Array.from(tensor.data as Float32Array);
  }

  /** The feeds of the rows `index[start:end]` of `arrays`, in the model's input order. */
  private feeds(arrays: Arrays, index: Uint32Array, start: number, end: number): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    const n = end - start;
    for (const spec of this.inputs) {
      const a = arrays.get(spec.name)!;
      const width = a.shape.slice(1).reduce((x, y) => x * y, 1);
      const Ctor = a.data.constructor as new (len: number) => typeof a.data;
      const data = new Ctor(n * width);
      for (let r = 0; r < n; r++) {
        const src = index[start + r]! * width;
        (data as Float32Array).set((a.data as Float32Array).subarray(src, src + width), r * width);
      }
      out[spec.name] = new this.ort.Tensor(a.dtype as "float32", data as Float32Array, [n, ...a.shape.slice(1)]);
    }
    return out;
  }

  private static loss(outputs: Record<string, unknown>, names: readonly string[]): number {
    const t = outputs[names[0]!] as Tensor;
    return Number((t.data as Float32Array)[0]);
  }

  /** Trains from `global`; returns the trained trainable parameters, examples per epoch and metrics. */
  async fit(global: Float32Array, data: Arrays, settings: TrainSettings, val?: Arrays,
            onProgress?: (p: Progress) => void): Promise<FitResult> {
    const session = settings.resetOptimizer ? await this.reset() : await this.ready();
    await this.load(global);
    const names = this.inputs.map((s) => s.name);
    const n = rows(data, names);
    if (n === 0) throw new DataError("training data holds no examples");
    const batch = settings.batchSize > 0 ? settings.batchSize : n;
    const rng = new NumpyGenerator(settings.seed);
    const scale = Math.fround(settings.learningRate) / this.baseLearningRate;
    const losses: number[] = [];
    const batches = Math.ceil(n / batch);
    const epochs = Math.max(1, settings.epochs);
    const current = Float32Array.from(global); // the parameters as last loaded (rescaled steps only)
    await session.lazyResetGrad();
    for (let epoch = 0; epoch < epochs; epoch++) {
      const order = rng.permutation(n);
      let sum = 0;
      for (let b = 0; b < batches; b++) {
        const start = b * batch;
        const end = Math.min(n, start + batch);
        const outputs = await session.runTrainStep(this.feeds(data, order, start, end));
        const loss = LocalTrainer.loss(outputs, session.trainingOutputNames);
        sum += loss * (end - start);
        await this.optimizerStep(session, scale, current);
        await session.lazyResetGrad();
        onProgress?.({ epoch, epochs, batch: b, batches, loss });
      }
      losses.push(sum / n);
    }
    const metrics: Record<string, number> = { train_loss: losses[losses.length - 1]! };
    if (val !== undefined && val.size > 0) Object.assign(metrics, await this.evaluate(val, 32, "val"));
    const vector = await this.parameters();
    for (let i = 0; i < vector.length; i++) {
      if (!Number.isFinite(vector[i])) {
        throw new TrainingError(`local training produced NaN or infinite parameters (learning rate ${settings.learningRate} too high?)`);
      }
    }
    return { vector, numExamples: n, metrics, losses };
  }

  /** One optimizer step at `scale` times the artifacts' rate; `current` holds the parameters before it and is
   * updated (only optimizer steps change parameters, so one read and one write a step suffice). */
  private async optimizerStep(session: TrainingSession, scale: number, current: Float32Array): Promise<void> {
    await session.runOptimizerStep();
    if (scale === 1) return;
    const after = await this.parameters();
    for (let i = 0; i < after.length; i++) current[i] = current[i]! + scale * (after[i]! - current[i]!);
    await this.load(current);
  }

  /** Mean loss and, for integer labels with a logits output, accuracy of the current parameters on `data`. */
  async evaluate(data: Arrays, batchSize = 32, prefix = "val"): Promise<Record<string, number>> {
    const session = await this.ready();
    const names = this.inputs.map((s) => s.name);
    const n = rows(data, names);
    const index = new Uint32Array(n).map((_, i) => i);
    const labelName = this.inputs[this.inputs.length - 1]!.name;
    const labels = data.get(labelName)!;
    let lossSum = 0;
    let correct = 0;
    let counted = false;
    for (let start = 0; start < n; start += batchSize) {
      const end = Math.min(n, start + batchSize);
      const outputs = await session.runEvalStep(this.feeds(data, index, start, end));
      lossSum += LocalTrainer.loss(outputs, session.evalOutputNames) * (end - start);
      const logits = session.evalOutputNames.find((name) => name !== session.evalOutputNames[0]);
      if (logits !== undefined && labels.dtype === "int64") {
        const t = outputs[logits] as Tensor;
        const k = t.dims[t.dims.length - 1]!;
        const values = t.data as Float32Array;
        for (let r = 0; r < end - start; r++) {
          let best = 0;
          for (let c = 1; c < k; c++) if (values[r * k + c]! > values[r * k + best]!) best = c;
          if (BigInt(best) === (labels.data as BigInt64Array)[start + r]) correct++;
        }
        counted = true;
      }
    }
    const out: Record<string, number> = { [`${prefix}_loss`]: lossSum / n };
    if (counted) out[`${prefix}_accuracy`] = correct / n;
    return out;
  }

  async release(): Promise<void> {
    if (this.session !== null) await this.session.release();
    this.session = null;
  }
}
