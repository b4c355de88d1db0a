/** A DeviceStore in a folder (Node): one file per key, written to a temporary name and renamed into place. */
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type DeviceStore, keyFile } from "./store.js";

export class FolderStore implements DeviceStore {
  constructor(private readonly folder: string) {}

  async get(key: string): Promise<Uint8Array | undefined> {
    try {
      return new Uint8Array(await readFile(join(this.folder, keyFile(key))));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    }
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    await mkdir(this.folder, { recursive: true });
    const path = join(this.folder, keyFile(key));
    const tmp = `${path}.${process.pid}.tmp`;
    await writeFile(tmp, value);
    await rename(tmp, path);
  }
}
