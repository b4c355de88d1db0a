// Which failures the web client retries (as edge_client/retry.py): codes waiting can fix and lost connections.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { isRetryable, retryAfterMs, withRetry } from "../dist/lib/retry.js";

const fast = { initialMs: 1, multiplier: 2, maxDelayMs: 5, giveUpAfterMs: 10_000 };

test("UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, a rate limit that says when and a failed fetch are retried", () => {
  assert.ok(isRetryable(new ConnectError("rate limit: retry in 2 s", Code.ResourceExhausted)));
  assert.ok(isRetryable(new ConnectError("slow down", Code.ResourceExhausted, { "retry-after": "3" })));
  for (const code of [Code.Unavailable, Code.DeadlineExceeded, Code.Aborted]) {
    assert.ok(isRetryable(new ConnectError("x", code)), Code[code]);
  }
  assert.ok(isRetryable(new ConnectError("fetch failed", Code.Unknown, undefined, undefined, new TypeError("fetch failed"))));
});

test("refusals a retry cannot fix are not retried", () => {
  for (const code of [Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.FailedPrecondition,
                      Code.NotFound, Code.Unknown, Code.ResourceExhausted]) {
    assert.ok(!isRetryable(new ConnectError("x", code)), Code[code]);
  }
});

test("a call failing UNAVAILABLE twice succeeds on the third attempt", async () => {
  let calls = 0;
  const value = await withRetry("x", async () => {
    if (++calls < 3) throw new ConnectError("restarting", Code.Unavailable);
    return "ok";
  }, fast);
  assert.deepEqual([value, calls], ["ok", 3]);
});

test("PERMISSION_DENIED is raised at the first attempt", async () => {
  let calls = 0;
  await assert.rejects(withRetry("x", async () => {
    calls++;
    throw new ConnectError("another device", Code.PermissionDenied);
  }, fast), /another device/);
  assert.equal(calls, 1);
});

test("RESOURCE_EXHAUSTED's retry-after or 'retry in S s' sets the least wait", () => {
  assert.equal(retryAfterMs(new ConnectError("rate limit: retry in 2.5 s", Code.ResourceExhausted)), 2500);
  assert.equal(retryAfterMs(new ConnectError("slow down", Code.ResourceExhausted, { "retry-after": "3" })), 3000);
  assert.equal(retryAfterMs(new ConnectError("too large", Code.ResourceExhausted)), 0);
});
