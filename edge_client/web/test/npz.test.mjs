// Reading client data in JS: .npz files NumPy wrote (stored and deflated) and CSV.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { parseCsv, parseNpz } from "../dist/lib/npz.js";
import { fedortCli } from "./fixtures.mjs";

const python = process.env.FEDORT_PYTHON ?? join(fedortCli(), "..", "python");

function numpyNpz(save) {
  const dir = mkdtempSync(join(tmpdir(), "fedort-npz-"));
  try {
    const path = join(dir, "d.npz");
    execFileSync(python, ["-c", `import numpy as np
x = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
np.${save}(${JSON.stringify(path)}, x=x, labels=np.array([2, 0, 9], dtype=np.int64), val_x=x[:1], w=np.array([1.5, -2.0]))`]);
    return new Uint8Array(readFileSync(path));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const save of ["savez", "savez_compressed"]) {
  test(`an .npz from np.${save} reads back as NumPy wrote it`, () => {
    const arrays = parseNpz(numpyNpz(save));
    assert.deepEqual([...arrays.keys()].sort(), ["labels", "val_x", "w", "x"]);
    const x = arrays.get("x");
    assert.equal(x.dtype, "float32");
    assert.deepEqual(x.shape, [3, 4]);
    assert.deepEqual(Array.from(x.data), Array.from({ length: 12 }, (_, i) => i / 4));
    assert.deepEqual(Array.from(arrays.get("labels").data), [2n, 0n, 9n]);
    assert.deepEqual(arrays.get("val_x").shape, [1, 4]);
    assert.deepEqual(Array.from(arrays.get("w").data), [1.5, -2.0]);
  });
}

test("a file that is not a zip is refused, naming the file", () => {
  assert.throws(() => parseNpz(new TextEncoder().encode("x,labels\n1,2\n"), "mine.npz"), /mine\.npz: not a readable \.npz/);
});

test("a CSV with a header gives features and integer labels from the last column", () => {
  const arrays = parseCsv("a,b,label\n0.5,1,3\n-2,4.25,0\n");
  assert.deepEqual(arrays.get("x").shape, [2, 2]);
  assert.deepEqual(Array.from(arrays.get("x").data), [0.5, 1, -2, 4.25]);
  assert.deepEqual(Array.from(arrays.get("labels").data), [3n, 0n]);
});

test("a CSV label that is not a class id is refused with its row", () => {
  assert.throws(() => parseCsv("1,2,0\n3,4,1.5\n", "d.csv"), /d\.csv: row 2: label 1\.5 is not a class id/);
});
