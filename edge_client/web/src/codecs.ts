/**
 * Update codecs byte-identical to the Python ones (protos/update_codecs): `raw` sends the trained vector,
 * `fp16` and `int8[:B]` send the delta d = trained - global. Layouts are in protos/PROTOCOL.md;
 * protos/testdata/codec_vectors.json holds inputs with the exact bytes both sides must produce.
 */
import { CodecError } from "./errors.js";
import { NumpyGenerator } from "./numpy-random.js";

/** Keeps int8's rounding draws apart from the shuffling draws of the same task seed (as the Python device). */
export const ROUNDING_STREAM = 0x1c0dec;
export const INT8_DEFAULT_BLOCK = 256;
export const FP16_MAX = 65504;

export interface CodecSpec {
  readonly name: "raw" | "fp16" | "int8";
  readonly block: number; // int8 only
  readonly canonical: string;
}

/** Parses the codecs this client implements (`raw`, `fp16`, `int8`, `int8:B`). */
export function parseCodec(text: string): CodecSpec {
  const [name, param] = text.split(":", 2) as [string, string | undefined];
  if (name === "raw" || name === "fp16") {
    if (param !== undefined) throw new CodecError(`codec ${JSON.stringify(text)}: ${name} takes no parameter`);
    return { name, block: 0, canonical: name };
  }
  if (name === "int8") {
    if (param === undefined) return { name, block: INT8_DEFAULT_BLOCK, canonical: "int8" };
    const block = /^\d+$/.test(param) ? Number(param) : NaN;
    if (!(block >= 16 && block <= 65536)) {
      throw new CodecError(`codec ${JSON.stringify(text)}: int8 block size must be an integer in [16, 65536]`);
    }
    return { name, block, canonical: block === INT8_DEFAULT_BLOCK ? "int8" : `int8:${block}` };
  }
  throw new CodecError(`codec ${JSON.stringify(text)} is not one this client implements; expected raw, fp16 or int8[:B]`);
}

/** Whether a run's allowed list (JoinReply.upload_codecs) admits `spec`, as protos.codecs.allows decides. */
export function allows(allowed: readonly string[], spec: CodecSpec): boolean {
  if (spec.canonical === "raw") return true;
  return allowed.some((entry) => {
    if (entry.startsWith("zstd+")) return false;
    const [name, param] = entry.split(":", 2);
    if (name !== spec.name) return false;
    if (param === undefined) return true;
    try {
      return parseCodec(entry).canonical === spec.canonical;
    } catch {
      return false;
    }
  });
}

function checkFinite(values: Float32Array, what: string): void {
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i])) throw new CodecError(`${what}: value ${values[i]} at index ${i} is not finite`);
  }
}

/** `raw`: little-endian float32, 4 bytes per value. */
export function encodeRaw(vector: Float32Array): Uint8Array {
  checkFinite(vector, "raw");
  const out = new Uint8Array(vector.length * 4);
  const view = new DataView(out.buffer);
  for (let i = 0; i < vector.length; i++) view.setFloat32(i * 4, vector[i]!, true);
  return out;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** binary16 bits of a float32 value, rounded to nearest even (NumPy's float32 -> float16 cast). */
export function halfBits(value: number): number {
  f32[0] = value;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign; // below half the smallest subnormal: rounds to zero
    mant |= 0x800000;
    const shift = 14 - e; // 14..24
    const half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    const up = rem > mid || (rem === mid && (half & 1) === 1);
    return sign | (half + (up ? 1 : 0));
  }
  const half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  const up = rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1);
  return sign | (half + (up ? 1 : 0)); // a carry into the exponent (or to infinity) is the right rounding
}

/** `fp16`: the delta as IEEE binary16, 2 bytes per value; refuses values beyond fp16's range. */
export function encodeFp16(delta: Float32Array): Uint8Array {
  checkFinite(delta, "fp16");
  const out = new Uint8Array(delta.length * 2);
  const view = new DataView(out.buffer);
  for (let i = 0; i < delta.length; i++) {
    const h = halfBits(delta[i]!);
    if ((h & 0x7c00) === 0x7c00) {
      throw new CodecError(`fp16 cannot represent ${delta[i]} at index ${i} (|x| must stay <= ${FP16_MAX}); use raw`);
    }
    view.setUint16(i * 2, h, true);
  }
  return out;
}

/** The float32 scale of a block: max|d| / 127 rounded up so that max|d| / s <= 127 (0 for zeros). */
function blockScale(delta: Float32Array, start: number, end: number): number {
  let peak = 0;
  for (let i = start; i < end; i++) peak = Math.max(peak, Math.abs(delta[i]!));
  f32[0] = peak / 127;
  if (f32[0] * 127 < peak) u32[0] = u32[0]! + 1; // next float32 towards +inf
  return f32[0];
}

/** `int8[:B]`: per block a float32 scale and B stochastically rounded int8 codes (see protos/update_codecs/int8.py). */
export function encodeInt8(delta: Float32Array, block: number, rng: NumpyGenerator): Uint8Array {
  checkFinite(delta, "int8");
  const blocks = Math.ceil(delta.length / block);
  const out = new Uint8Array(4 * blocks + delta.length);
  const view = new DataView(out.buffer);
  let at = 0;
  for (let start = 0; start < delta.length; start += block) {
    const end = Math.min(delta.length, start + block);
    const s = blockScale(delta, start, end);
    view.setFloat32(at, s, true);
    at += 4;
    for (let i = start; i < end; i++) {
      const t = s > 0 ? delta[i]! / s : 0;
      const q = Math.min(127, Math.max(-127, Math.floor(t + rng.random())));
      view.setInt8(at++, q);
    }
  }
  return out;
}

/** The payload of `spec` for a trained vector: raw sends `trained`, the others the delta from `global`. */
export function encodeUpdate(spec: CodecSpec, trained: Float32Array, global: Float32Array, seed: bigint): Uint8Array {
  if (spec.name === "raw") return encodeRaw(trained);
  if (trained.length !== global.length) {
    throw new CodecError(`trained vector has ${trained.length} values, the global vector ${global.length}`);
  }
  const delta = new Float32Array(trained.length);
  for (let i = 0; i < delta.length; i++) delta[i] = trained[i]! - global[i]!;
  if (spec.name === "fp16") return encodeFp16(delta);
  return encodeInt8(delta, spec.block, new NumpyGenerator([seed, ROUNDING_STREAM]));
}
