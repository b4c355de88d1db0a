/**
 * The header an update is sent with (BeginUpload's, as SubmitUpdate's first part), built as the
 * Python device builds it (edge_client/uploads/update_headers.py): raw names the vector itself (`codec`
 * "raw", no base, `payload_bytes` 0); fp16 / int8 name the delta's base, the global vector the
 * update was trained from. The payload digest is sha256. Checked byte for byte against
 * protos/testdata/codec_vectors.json.
 */
import { create } from "@bufbuild/protobuf";
import type { CodecSpec } from "./codecs.js";
import { MetricSchema, UpdateHeaderSchema, VectorHeaderSchema, type UpdateHeader } from "./gen/fedort_v1_pb.js";
import { sha256 } from "./transport.js";

export const CHUNK_BYTES = 1 << 20;

export interface UpdateFacts {
  readonly clientId: string;
  readonly modelId: string;
  readonly round: bigint;
  readonly spec: CodecSpec;
  readonly payload: Uint8Array;
  readonly length: number;           // values in the vector
  readonly globalSha256: Uint8Array; // the global vector it was trained from
  readonly numExamples: number;
  readonly metrics: Readonly<Record<string, number>>; // all averaged across clients (sync_dist)
}

export async function updateHeader(u: UpdateFacts): Promise<UpdateHeader> {
  const raw = u.spec.name === "raw";
  const metrics = Object.fromEntries(Object.entries(u.metrics).filter(([, v]) => Number.isFinite(v))
    .map(([k, v]) => [k, create(MetricSchema, { value: v, syncDist: true })]));
  return create(UpdateHeaderSchema, {
    clientId: u.clientId, numExamples: BigInt(u.numExamples), metrics, trainedFromSha256: u.globalSha256,
    vector: create(VectorHeaderSchema, {
      modelId: u.modelId, round: u.round, length: BigInt(u.length), dtype: "float32", codec: u.spec.canonical,
      sha256: await sha256(u.payload), chunkSize: CHUNK_BYTES,
      baseSha256: raw ? new Uint8Array() : u.globalSha256, payloadBytes: raw ? 0n : BigInt(u.payload.length),
    }),
  });
}
