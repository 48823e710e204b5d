// What every scenario shares: Debian's Chromium driven by the pinned
// playwright-core (installed by ./install; never a browser download), the
// console's URL and token from the environment, a screenshot per step, and
// one line per step on stdout ("ok STEP") for tests/it/admin_browser.rs.
//
// Environment: BUB_E2E_MODULES (the install folder), BUB_CONSOLE (the
// console's URL, ending in /admin), BUB_TOKEN (an admin token),
// BUB_SCREENSHOTS (a folder), and whatever the scenario reads besides.
import { createRequire } from "node:module";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(need("BUB_E2E_MODULES"), "package.json"));
const { chromium } = require("playwright-core");

export function need(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`FAIL: the environment has no ${name}`);
    process.exit(2);
  }
  return value;
}

export const console_url = () => need("BUB_CONSOLE");

export function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

export function equal(actual, expected, message) {
  if (actual !== expected) throw new Error(`check failed: ${message}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

let scenarioName = "scenario";
let shotsDir = null;

/// A screenshot of `page` as `<scenario>-<step>.png`, then "ok STEP".
export async function step(page, name) {
  if (shotsDir) await page.screenshot({ path: join(shotsDir, `${scenarioName}-${name}.png`), fullPage: true });
  console.log(`ok ${name}`);
}

/// A page that records what would go wrong silently: script errors and
/// console errors (a CSP violation is one).
export async function newPage(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
  const page = await context.newPage();
  page.problems = [];
  page.on("pageerror", (error) => page.problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error" && !/Failed to load resource: the server responded with a status of (4\d\d)/.test(message.text())) {
      page.problems.push(`console error: ${message.text()}`);
    }
  });
  page.setDefaultTimeout(10_000);
  return page;
}

/// Opens the console at `url` and logs in with `token`; the page shows the console.
export async function login(page, token = need("BUB_TOKEN"), url = console_url()) {
  await page.goto(`${url}/`);
  await page.getByLabel("Admin token").fill(token);
  await Promise.all([page.waitForURL(`${url}/`), page.getByRole("button", { name: "Log in" }).click()]);
  await page.locator("#who").filter({ hasText: "replica" }).waitFor();
}

/// Runs `body(browser)` as scenario `name`; exits 1 with "FAIL: …" (and a
/// screenshot of every open page) when it throws or a page had a problem.
export async function scenario(name, body) {
  scenarioName = name;
  shotsDir = process.env.BUB_SCREENSHOTS || null;
  if (shotsDir) mkdirSync(shotsDir, { recursive: true });
  const browser = await chromium.launch({
    executablePath: process.env.BUB_CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  let failed = false;
  try {
    await body(browser);
    const problems = browser.contexts().flatMap((context) => context.pages()).flatMap((page) => page.problems ?? []);
    if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
    console.log(`done ${name}`);
  } catch (error) {
    failed = true;
    console.log(`FAIL: ${error.stack ?? error}`);
    let n = 0;
    for (const page of browser.contexts().flatMap((context) => context.pages())) {
      if (shotsDir) await page.screenshot({ path: join(shotsDir, `${name}-failed-${n++}.png`), fullPage: true }).catch(() => {});
    }
  } finally {
    await browser.close();
  }
  process.exit(failed ? 1 : 0);
}
