// Test helpers for the real headless Chromium: a static server for dist/ (plus extra files) and a fresh browser.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { extname, join, normalize } from "node:path";
import { chromium } from "playwright-core";
import { webRoot } from "./fixtures.mjs";

export const CHROMIUM = process.env.FEDORT_CHROMIUM ?? "/usr/bin/chromium";
export const chromiumMissing = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (apt-get install chromium)`;
export const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm" };

/** Serves dist/ at / and `extra` (url path -> bytes) on 127.0.0.1 at a free port; resolves to {url, close}. */
export function serveDist(extra = {}) {
  const dist = join(webRoot, "dist");
  const server = createServer((req, res) => {
    const asked = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const path = asked === "/" ? "/index.html" : asked;
    let body = extra[path];
    if (body === undefined) {
      const file = normalize(join(dist, path));
      if (file.startsWith(dist) && existsSync(file)) body = readFileSync(file);
    }
    if (body === undefined) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" }).end(body);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((done) => { server.closeAllConnections(); server.close(done); }),
  })));
}

/** A fresh Chromium profile (its own IndexedDB); close() removes it. */
export async function freshBrowser() {
  const profile = mkdtempSync(join(tmpdir(), "fedort-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS,
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
