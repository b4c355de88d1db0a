/** The slice of onnxruntime-web's training build the client uses (the module differs by platform: ort-loader). */
import type { InferenceSession, Tensor, TrainingSession } from "onnxruntime-web";

export type { InferenceSession, Tensor, TrainingSession };

export interface OrtTraining {
  readonly Tensor: typeof Tensor;
  readonly TrainingSession: { create: typeof TrainingSession.create };
  readonly env: { wasm: { numThreads?: number; wasmPaths?: string | Record<string, string> }; logLevel?: string };
}
