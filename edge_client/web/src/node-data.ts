/** Client data files under Node: `.npz` (train arrays, `val_*` the validation split) or CSV. */
import { readFile } from "node:fs/promises";
import type { DeviceData } from "./device.js";
import { type NdArray, parseCsv, parseNpz } from "./npz.js";

export function splitValidation(arrays: ReadonlyMap<string, NdArray>): DeviceData {
  const train = new Map<string, NdArray>();
  const val = new Map<string, NdArray>();
  for (const [name, a] of arrays) (name.startsWith("val_") ? val.set(name.slice(4), a) : train.set(name, a));
  return val.size > 0 ? { train, val } : { train };
}

export async function readDataFile(path: string): Promise<DeviceData> {
  const bytes = new Uint8Array(await readFile(path));
  return splitValidation(path.endsWith(".csv") ? parseCsv(new TextDecoder().decode(bytes), path) : parseNpz(bytes, path));
}
