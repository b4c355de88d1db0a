// Drives browser tabs as devices (for end-to-end tests and demos), each in its own fresh Chromium profile:
//   node scripts/tabs.mjs --url http://127.0.0.1:PORT/ --tab NAME,TOKEN,DATA.npz[,CODEC] [--tab ...] [--codec int8]
//                         [--reload NAME] [--screenshot NAME=FILE.png] [--timeout-ms 180000]
// Every tab opens the page, picks its data file, joins and trains until the run is done. `--reload NAME`
// reloads that tab once after its first report (it must join again as the same device); `--screenshot` saves
// that tab's page after its second report. Prints one JSON
// object: {tabs: [{name, clientIds, reports, resumed, artifactDownloads (per page load), error}]}; exits 1 if a
// tab failed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values } = parseArgs({
  options: {
    url: { type: "string" }, tab: { type: "string", multiple: true, default: [] }, codec: { type: "string", default: "raw" },
    reload: { type: "string", default: "" }, screenshot: { type: "string", default: "" }, "timeout-ms": { type: "string", default: "180000" },
    chromium: { type: "string", default: "/usr/bin/chromium" },
  },
});
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const deadline = Date.now() + Number(values["timeout-ms"]);

async function until(page, predicate, arg) {
  await page.waitForFunction(predicate, arg, { timeout: Math.max(1000, deadline - Date.now()), polling: 100 });
}

const finished = (events) => events.some((e) => e.type === "done" || (e.type === "phase" && e.phase.startsWith("error")));

async function runTab(spec) {
  const [name, token, data, codec = values.codec] = spec.split(",");
  const profile = mkdtempSync(join(tmpdir(), "fedort-tab-"));
  const context = await chromium.launchPersistentContext(profile, { executablePath: values.chromium, headless: true, args: ARGS });
  const result = { name, clientIds: [], reports: [], resumed: [], artifactDownloads: [], error: null };
  try {
    const page = await context.newPage();
    const url = `${values.url}?${new URLSearchParams({ token, name, codec })}`;
    const open = async () => {
      await page.goto(url);
      await page.setInputFiles("#file", data);
      await page.click("#start");
    };
    const collect = async () => {
      const events = await page.evaluate(() => globalThis.fedortEvents);
      result.artifactDownloads.push(events.filter((e) => e.type === "phase" && e.phase.startsWith("downloading ")).length);
      for (const e of events) {
        if (e.type === "joined") { result.clientIds.push(e.clientId); result.resumed.push(e.resumed); }
        if (e.type === "report") result.reports.push(e.report);
        if (e.type === "phase" && e.phase.startsWith("error")) result.error = e.phase;
      }
    };
    await open();
    if (values.reload === name) {
      await until(page, () => globalThis.fedortEvents.some((e) => e.type === "report"));
      await collect();
      await page.reload(); // the tab goes away mid-run and comes back
      await page.setInputFiles("#file", data);
      await page.click("#start");
    }
    const [shotTab, shotFile] = values.screenshot.split("=");
    if (shotTab === name) {
      await until(page, () => globalThis.fedortEvents.filter((e) => e.type === "report").length >= 2);
      await until(page, () => document.getElementById("round").textContent !== "…");
      await page.screenshot({ path: shotFile, fullPage: true });
    }
    await until(page, `(${finished.toString()})(globalThis.fedortEvents)`);
    await collect();
  } catch (e) {
    result.error = String(e);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
  return result;
}

const tabs = await Promise.all(values.tab.map(runTab));
process.stdout.write(`${JSON.stringify({ tabs })}\n`);
process.exit(tabs.some((t) => t.error !== null) ? 1 : 0);
