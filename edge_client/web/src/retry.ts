/**
 * Retries as the Python device does (edge_client/transport/retry.py): UNAVAILABLE, DEADLINE_EXCEEDED and
 * ABORTED, RESOURCE_EXHAUSTED when it says when (waiting at least that long) and a lost connection, with
 * exponential backoff and full jitter; every other code is raised at once.
 */
import { Code, ConnectError } from "@connectrpc/connect";

export interface Backoff {
  readonly initialMs: number;
  readonly multiplier: number;
  readonly maxDelayMs: number;
  readonly giveUpAfterMs: number;
}

export const DEFAULT_BACKOFF: Backoff = { initialMs: 200, multiplier: 2, maxDelayMs: 10_000, giveUpAfterMs: 300_000 };

const RETRYABLE = new Set([Code.Unavailable, Code.DeadlineExceeded, Code.Aborted]);

/** Whether waiting can fix `e`: a retryable code, or a connection that failed (fetch's TypeError, which Connect
 * reports as UNKNOWN with that cause). */
export function isRetryable(e: unknown): boolean {
  if (e instanceof ConnectError) {
    return RETRYABLE.has(e.code) || retryAfterMs(e) > 0 || (e.code === Code.Unknown && e.cause instanceof TypeError);
  }
  return e instanceof TypeError;
}

/** The least wait a RESOURCE_EXHAUSTED refusal asks for, in ms: its `retry-after: S` header, or "retry in S s" in
 * its message; 0 when it names none (a size limit: retrying the same request would fail the same way). */
export function retryAfterMs(e: unknown): number {
  if (!(e instanceof ConnectError) || e.code !== Code.ResourceExhausted) return 0;
  const header = Number(e.metadata.get("retry-after") ?? NaN);
  if (header > 0) return header * 1000;
  const m = /retry in ([0-9.]+) ?s/.exec(e.rawMessage);
  return m ? Number(m[1]) * 1000 : 0;
}

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(t); reject(signal.reason); }, { once: true });
  });

/** `fn()` until it succeeds, a non-retryable error, or the backoff gives up. */
export async function withRetry<T>(what: string, fn: () => Promise<T>, backoff: Backoff = DEFAULT_BACKOFF,
                                   signal?: AbortSignal, onRetry?: (what: string, e: unknown) => void): Promise<T> {
  const started = Date.now();
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (!isRetryable(e) || signal?.aborted) throw e;
      const cap = Math.min(backoff.maxDelayMs, backoff.initialMs * backoff.multiplier ** attempt);
      const delay = Math.max(Math.random() * cap, retryAfterMs(e));
      if (Date.now() + delay - started > backoff.giveUpAfterMs) throw e;
      onRetry?.(what, e);
      await sleep(delay, signal);
    }
  }
}
