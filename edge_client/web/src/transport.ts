/**
 * The coordinator's `fedort.v1.Coordinator` service over the Connect protocol (binary protobuf),
 * as the coordinator serves it on `--web-address`. Every call carries `Authorization: Bearer <token>`
 * (the same token the gRPC port takes as `authorization` metadata). Streams (artifacts, vectors) are
 * server streams of a header then chunks; uploads are the resumable unary upload (protocol 1.7).
 */
import { ProtocolError } from "./errors.js";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { Coordinator } from "./gen/fedort_v1_pb.js";

export type CoordinatorClient = Client<typeof Coordinator>;

/** Deadlines (every call has one; DEADLINE_EXCEEDED is retried): a unary call, a part upload, a whole stream. */
export const RPC_TIMEOUT_MS = 30_000;
export const PART_TIMEOUT_MS = 120_000;
export const STREAM_TIMEOUT_MS = 600_000;

export function bearer(token: string): Interceptor {
  return (next) => async (req) => {
    if (token) req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
}

/** A client of the coordinator at `baseUrl` (e.g. `http://127.0.0.1:7430`, or the page's own origin). */
export function connect(baseUrl: string, token: string, fetchImpl?: typeof fetch): CoordinatorClient {
  const transport = createConnectTransport({
    baseUrl, useBinaryFormat: true, interceptors: [bearer(token)],
    ...(fetchImpl !== undefined ? { fetch: fetchImpl } : {}),
  });
  return createClient(Coordinator, transport);
}

export async function sha256(data: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", data as unknown as ArrayBuffer));
}

export function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function concat(chunks: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** One artifact file, checked against the sha256 the Join reply announced for it. */
export async function downloadArtifact(client: CoordinatorClient, clientId: string, modelId: string, name: string,
                                       expectedSha256: Uint8Array, signal?: AbortSignal): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let header = false;
  for await (const part of client.downloadArtifact({ clientId, modelId, name }, { signal, timeoutMs: STREAM_TIMEOUT_MS })) {
    if (part.part.case === "header") {
      if (hex(part.part.value.sha256) !== hex(expectedSha256)) {
        throw new ProtocolError(`artifact ${name}: stream header sha256 differs from the Join reply`);
      }
      header = true;
    } else if (part.part.case === "chunk") {
      if (!header) throw new ProtocolError(`artifact stream for ${name} must start with a header`);
      chunks.push(part.part.value);
    }
  }
  const bytes = concat(chunks);
  const digest = await sha256(bytes);
  if (hex(digest) !== hex(expectedSha256)) {
    throw new ProtocolError(`artifact ${name}: sha256 ${hex(digest).slice(0, 12)}… differs from the announced ${hex(expectedSha256).slice(0, 12)}…`);
  }
  return bytes;
}

/** The round's global vector (raw float32), checked for length and against the header's and the task's sha256. */
export async function downloadVector(client: CoordinatorClient, clientId: string, modelId: string, round: bigint,
                                     length: number, expectedSha256: Uint8Array, signal?: AbortSignal)
  : Promise<{ vector: Float32Array; sha256: Uint8Array }> {
  const chunks: Uint8Array[] = [];
  let headerSha: Uint8Array | null = null;
  for await (const part of client.downloadVector({ clientId, modelId, round }, { signal, timeoutMs: STREAM_TIMEOUT_MS })) {
    if (part.part.case === "header") {
      const h = part.part.value;
      if (h.codec !== "" && h.codec !== "raw") throw new ProtocolError(`round ${round}: vector codec ${h.codec}, expected raw`);
      if (Number(h.length) !== length) throw new ProtocolError(`round ${round}: vector has ${h.length} values, the model ${length}`);
      if (h.digest !== "" && h.digest !== "sha256") throw new ProtocolError(`round ${round}: vector digest ${h.digest}, expected sha256`);
      headerSha = h.sha256;
    } else if (part.part.case === "chunk") {
      if (headerSha === null) throw new ProtocolError(`vector stream of round ${round} must start with a header`);
      chunks.push(part.part.value);
    }
  }
  const bytes = concat(chunks);
  if (headerSha === null || bytes.length !== 4 * length) {
    throw new ProtocolError(`round ${round}: vector stream carried ${bytes.length} bytes, expected ${4 * length}`);
  }
  const digest = await sha256(bytes);
  if (hex(digest) !== hex(headerSha) || (expectedSha256.length > 0 && hex(digest) !== hex(expectedSha256))) {
    throw new ProtocolError(`round ${round}: global vector sha256 ${hex(digest).slice(0, 12)}… does not match its header / task`);
  }
  return { vector: new Float32Array(bytes.buffer, bytes.byteOffset, length), sha256: digest };
}
