/**
 * NumPy's default generator (`numpy.random.default_rng(seed)`: SeedSequence -> PCG64), the parts
 * fedort's Python device draws from: `random()` (int8's stochastic rounding) and `permutation(n)`
 * (the trainer's per-epoch shuffle). Reimplemented so a TypeScript device rounds and shuffles
 * exactly as a Python device given the same task seed does.
 */

const MASK64 = (1n << 64n) - 1n;
const MASK128 = (1n << 128n) - 1n;
const PCG_MULTIPLIER = (0x2360ed051fc65da4n << 64n) | 0x4385df649fccf645n;

const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;
const POOL_SIZE = 4;

/** The 32-bit words NumPy's SeedSequence takes from one non-negative integer (least significant first). */
function intWords(value: bigint): number[] {
  if (value < 0n) throw new RangeError(`seed values must be non-negative, got ${value}`);
  const words: number[] = [];
  do {
    words.push(Number(value & 0xffffffffn));
    value >>= 32n;
  } while (value > 0n);
  return words;
}

/** SeedSequence(entropy).generate_state(words, uint32): the pool mixing and output hashing of NumPy. */
export function seedSequenceState(entropy: readonly (number | bigint)[], nWords: number): Uint32Array {
  const input = entropy.flatMap((v) => intWords(BigInt(v)));
  while (input.length < POOL_SIZE) input.push(0);
  let hashConst = INIT_A;
  const hashmix = (value: number): number => {
    value = (value ^ hashConst) >>> 0;
    hashConst = Math.imul(hashConst, MULT_A) >>> 0;
    value = Math.imul(value, hashConst) >>> 0;
    return (value ^ (value >>> 16)) >>> 0;
  };
  const mix = (x: number, y: number): number => {
    const r = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
    return (r ^ (r >>> 16)) >>> 0;
  };
  const pool = new Array<number>(POOL_SIZE);
  for (let i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(input[i] ?? 0);
  for (let src = 0; src < POOL_SIZE; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) {
      if (src !== dst) pool[dst] = mix(pool[dst]!, hashmix(pool[src]!));
    }
  }
  for (let src = POOL_SIZE; src < input.length; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst]!, hashmix(input[src]!));
  }
  const out = new Uint32Array(nWords);
  let h = INIT_B;
  for (let i = 0; i < nWords; i++) {
    let v = (pool[i % POOL_SIZE]! ^ h) >>> 0;
    h = Math.imul(h, MULT_B) >>> 0;
    v = Math.imul(v, h) >>> 0;
    out[i] = (v ^ (v >>> 16)) >>> 0;
  }
  return out;
}

/** PCG64 (XSL-RR 128/64) seeded as NumPy seeds it from a SeedSequence. */
export class NumpyGenerator {
  private state = 0n;
  private readonly inc: bigint;
  private buffered: number | null = null;

  /** `numpy.random.default_rng(seed)`; an array seed is `default_rng([a, b, ...])`. */
  constructor(seed: number | bigint | readonly (number | bigint)[]) {
    const words = seedSequenceState(Array.isArray(seed) ? seed : [seed as number | bigint], 8);
    const u64 = (i: number): bigint => (BigInt(words[2 * i + 1]!) << 32n) | BigInt(words[2 * i]!);
    const initState = (u64(0) << 64n) | u64(1);
    const initSeq = (u64(2) << 64n) | u64(3);
    this.inc = ((initSeq << 1n) | 1n) & MASK128;
    this.step();
    this.state = (this.state + initState) & MASK128;
    this.step();
  }

  private step(): void {
    this.state = (this.state * PCG_MULTIPLIER + this.inc) & MASK128;
  }

  /** The next 64-bit output. */
  nextUint64(): bigint {
    this.step();
    const hi = this.state >> 64n;
    const x = (hi ^ (this.state & MASK64)) & MASK64;
    const rot = Number(hi >> 58n);
    return ((x >> BigInt(rot)) | (x << BigInt((64 - rot) & 63))) & MASK64;
  }

  /** The next 32-bit output (NumPy hands out both halves of a 64-bit draw, low half first). */
  nextUint32(): number {
    if (this.buffered !== null) {
      const v = this.buffered;
      this.buffered = null;
      return v;
    }
    const v = this.nextUint64();
    this.buffered = Number(v >> 32n);
    return Number(v & 0xffffffffn);
  }

  /** `Generator.random()`: a double in [0, 1) from the top 53 bits of a 64-bit draw. */
  random(): number {
    return Number(this.nextUint64() >> 11n) / 9007199254740992;
  }

  /** A uniform integer in [0, max] by masked rejection (NumPy's `random_interval`). */
  interval(max: number): number {
    if (max === 0) return 0;
    if (max > 0xffffffff) throw new RangeError("interval beyond 32 bits is not needed here");
    let mask = max;
    mask |= mask >>> 1;
    mask |= mask >>> 2;
    mask |= mask >>> 4;
    mask |= mask >>> 8;
    mask |= mask >>> 16;
    mask >>>= 0;
    for (;;) {
      const v = (this.nextUint32() & mask) >>> 0;
      if (v <= max) return v;
    }
  }

  /** `Generator.permutation(n)`: arange(n) shuffled by Fisher-Yates from the end. */
  permutation(n: number): Uint32Array {
    const out = new Uint32Array(n);
    for (let i = 0; i < n; i++) out[i] = i;
    for (let i = n - 1; i > 0; i--) {
      const j = this.interval(i);
      const t = out[i]!;
      out[i] = out[j]!;
      out[j] = t;
    }
    return out;
  }
}
