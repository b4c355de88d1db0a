/**
 * What a device keeps between runs: its client id (per coordinator and device name) and the
 * artifacts it verified (by sha256), so a reloaded tab or restarted process joins as the same
 * device without downloading again. IndexedDB in the browser, a folder under Node.
 */
export interface DeviceStore {
  get(key: string): Promise<Uint8Array | undefined>;
  put(key: string, value: Uint8Array): Promise<void>;
}

export async function getText(store: DeviceStore, key: string): Promise<string | undefined> {
  const v = await store.get(key);
  return v === undefined ? undefined : new TextDecoder().decode(v);
}

export async function putText(store: DeviceStore, key: string, value: string): Promise<void> {
  await store.put(key, new TextEncoder().encode(value));
}

/** A store in the origin's IndexedDB (one object store of byte values by key). */
export class IndexedDbStore implements DeviceStore {
  private db: Promise<IDBDatabase>;

  constructor(name = "fedort-device") {
    this.db = new Promise((resolve, reject) => {
      const req = indexedDB.open(name, 1);
      req.onupgradeneeded = () => req.result.createObjectStore("kv");
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
  }

  private async run<T>(mode: IDBTransactionMode, op: (s: IDBObjectStore) => IDBRequest): Promise<T> {
    const db = await this.db;
    return new Promise((resolve, reject) => {
      const tx = db.transaction("kv", mode);
      const req = op(tx.objectStore("kv"));
      tx.oncomplete = () => resolve(req.result as T);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    const v = await this.run<Uint8Array | undefined>("readonly", (s) => s.get(key));
    return v === undefined ? undefined : new Uint8Array(v);
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    await this.run("readwrite", (s) => s.put(value, key));
  }
}

/** Keys as hex file names, since a key names a coordinator URL or an artifact digest. */
export function keyFile(key: string): string {
  return Array.from(new TextEncoder().encode(key), (b) => b.toString(16).padStart(2, "0")).join("");
}
