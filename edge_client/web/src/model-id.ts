/**
 * The model id: lowercase hex sha256 of the manifest without its `model_id`, as Python's
 * `json.dumps(content, sort_keys=True, separators=(",", ":"))` writes it (ASCII only, non-ASCII as
 * \uXXXX). Manifests hold strings, integers, booleans, null, lists and objects; a float with no
 * fractional part would print as `1.0` in Python and `1` here, so such a manifest does not verify.
 */
import { hex, sha256 } from "./transport.js";

export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${canonicalJson(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** The id a manifest (parsed JSON) hashes to. */
export async function modelId(manifest: Record<string, unknown>): Promise<string> {
  const { model_id: _, ...content } = manifest;
  return hex(await sha256(new TextEncoder().encode(canonicalJson(content))));
}
