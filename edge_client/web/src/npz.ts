/**
 * Client data in the tab: `.npz` files (a zip of `.npy` arrays, stored or deflated) and CSV, read
 * into the same named arrays the Python device takes (`x`, `labels`, optional `val_x`, `val_labels`).
 * Nothing here leaves the device.
 */
import { DataError } from "./errors.js";
import { unzipSync } from "fflate";

export type ArrayData = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array | Int8Array;

export interface NdArray {
  readonly dtype: "float32" | "float64" | "int32" | "int64" | "uint8" | "int8";
  readonly shape: readonly number[];
  readonly data: ArrayData;
}

const DESCR: Record<string, [NdArray["dtype"], number]> = {
  "<f4": ["float32", 4], "<f8": ["float64", 8], "<i4": ["int32", 4], "<i8": ["int64", 8],
  "|u1": ["uint8", 1], "|i1": ["int8", 1], "<u1": ["uint8", 1], "<i1": ["int8", 1],
};

function fail(where: string, what: string): never {
  throw new DataError(`${where}: ${what}`);
}

/** One `.npy` file (format 1.0 / 2.0 / 3.0, little-endian, C order, no pickles). */
export function parseNpy(bytes: Uint8Array, where = "npy"): NdArray {
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];
  if (bytes.length < 10 || magic.some((b, i) => bytes[i] !== b)) fail(where, "not a .npy array (bad magic)");
  const major = bytes[6]!;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(bytes.subarray(start, start + headerLen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const fortran = /'fortran_order':\s*(True|False)/.exec(header)?.[1];
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)?.[1];
  if (descr === undefined || fortran === undefined || shapeText === undefined) fail(where, `unreadable header ${header}`);
  if (fortran === "True") fail(where, "Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  const kind = DESCR[descr];
  if (kind === undefined) fail(where, `dtype ${descr} is not supported; expected one of ${Object.keys(DESCR).join(", ")}`);
  const shape = shapeText.split(",").map((s) => s.trim()).filter((s) => s.length > 0).map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const offset = start + headerLen;
  const body = bytes.slice(offset, offset + count * kind[1]); // a copy: aligned for the typed array
  if (body.length !== count * kind[1]) fail(where, `holds ${body.length} data bytes, its shape needs ${count * kind[1]}`);
  const buf = body.buffer;
  const data: ArrayData = {
    float32: () => new Float32Array(buf), float64: () => new Float64Array(buf), int32: () => new Int32Array(buf),
    int64: () => new BigInt64Array(buf), uint8: () => new Uint8Array(buf), int8: () => new Int8Array(buf),
  }[kind[0]]();
  return { dtype: kind[0], shape, data };
}

/** Every array of a `.npz` file by name. */
export function parseNpz(bytes: Uint8Array, where = "npz"): Map<string, NdArray> {
  let files: Record<string, Uint8Array>;
  try {
    files = unzipSync(bytes);
  } catch (e) {
    fail(where, `not a readable .npz (zip) file: ${(e as Error).message}`);
  }
  const out = new Map<string, NdArray>();
  for (const [name, content] of Object.entries(files)) {
    if (!name.endsWith(".npy")) continue;
    const key = name.slice(0, -4);
    out.set(key, parseNpy(content, `${where}/${name}`));
  }
  if (out.size === 0) fail(where, "holds no arrays; expected x and labels");
  return out;
}

/** A CSV of numbers, one example a row, the last column the integer class label (a header row is skipped). */
export function parseCsv(text: string, where = "csv"): Map<string, NdArray> {
  const rows = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0).map((l) => l.split(","));
  if (rows.length > 0 && rows[0]!.some((c) => Number.isNaN(Number(c)))) rows.shift();
  if (rows.length === 0) fail(where, "holds no rows of numbers");
  const width = rows[0]!.length;
  if (width < 2) fail(where, "needs at least one feature column and a label column");
  const x = new Float32Array(rows.length * (width - 1));
  const labels = new BigInt64Array(rows.length);
  rows.forEach((row, r) => {
    if (row.length !== width) fail(where, `row ${r + 1} has ${row.length} columns, the first ${width}`);
    for (let c = 0; c < width - 1; c++) {
      const v = Number(row[c]);
      if (!Number.isFinite(v)) fail(where, `row ${r + 1} column ${c + 1} is not a number: ${row[c]}`);
      x[r * (width - 1) + c] = v;
    }
    const label = Number(row[width - 1]);
    if (!Number.isInteger(label) || label < 0) fail(where, `row ${r + 1}: label ${row[width - 1]} is not a class id`);
    labels[r] = BigInt(label);
  });
  return new Map<string, NdArray>([
    ["x", { dtype: "float32", shape: [rows.length, width - 1], data: x }],
    ["labels", { dtype: "int64", shape: [rows.length], data: labels }],
  ]);
}
