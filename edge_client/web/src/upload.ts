/**
 * The resumable unary upload (protocol 1.7, protos/PROTOCOL.md): BeginUpload with the update's
 * header, PutUploadPart at the acknowledged offset, CommitUpload. After a failed part the client
 * asks GetUpload where the coordinator stands and continues from there, so at most the part in
 * flight travels twice. A Begin whose answer was lost is repeated: the same header gives the
 * same upload back; an upload the coordinator dropped (NOT_FOUND) is begun again.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import type { SubmitReply, UpdateHeader } from "./gen/fedort_v1_pb.js";
import { type Backoff, DEFAULT_BACKOFF, isRetryable, withRetry } from "./retry.js";
import { type CoordinatorClient, PART_TIMEOUT_MS, RPC_TIMEOUT_MS, sha256 } from "./transport.js";

export interface UploadProgress {
  readonly offset: number;
  readonly total: number;
}

export interface UploadOptions {
  readonly backoff?: Backoff;
  readonly signal?: AbortSignal;
  readonly onProgress?: (p: UploadProgress) => void;
  /** Largest part to send even if the coordinator allows more. */
  readonly maxPartBytes?: number;
}

/** Begins again when the coordinator dropped the upload (NOT_FOUND: expired while the link was down, or the
 * coordinator restarted), up to this many times. */
const MAX_BEGINS = 3;

export async function uploadUpdate(client: CoordinatorClient, header: UpdateHeader, payload: Uint8Array,
                                   options: UploadOptions = {}): Promise<SubmitReply> {
  for (let begins = 1; ; begins++) {
    try {
      return await uploadOnce(client, header, payload, options);
    } catch (e) {
      if (!(e instanceof ConnectError && e.code === Code.NotFound) || begins >= MAX_BEGINS) throw e;
    }
  }
}

async function uploadOnce(client: CoordinatorClient, header: UpdateHeader, payload: Uint8Array,
                          options: UploadOptions): Promise<SubmitReply> {
  const backoff = options.backoff ?? DEFAULT_BACKOFF;
  const clientId = header.clientId;
  const retry = <T>(what: string, fn: () => Promise<T>) => withRetry(what, fn, backoff, options.signal);
  const call = { signal: options.signal, timeoutMs: RPC_TIMEOUT_MS };
  let state = await retry("BeginUpload", () => client.beginUpload({ header }, call));
  const uploadId = state.uploadId;
  const ref = { clientId, uploadId };
  let offset = Number(state.offset);
  const limit = Math.max(1, Math.min(state.maxPartBytes || 1 << 20, options.maxPartBytes ?? Infinity));
  while (offset < payload.length) {
    const data = payload.subarray(offset, Math.min(payload.length, offset + limit));
    try {
      state = await client.putUploadPart(
        { clientId, uploadId, offset: BigInt(offset), data, sha256: await sha256(data) },
        { signal: options.signal, timeoutMs: PART_TIMEOUT_MS });
    } catch (e) {
      const resumable = isRetryable(e) || (e instanceof ConnectError && e.code === Code.FailedPrecondition);
      if (!resumable || options.signal?.aborted) throw e;
      state = await retry("GetUpload", () => client.getUpload(ref, call));
    }
    offset = Number(state.offset);
    options.onProgress?.({ offset, total: payload.length });
  }
  return retry("CommitUpload", () => client.commitUpload(ref, call));
}
