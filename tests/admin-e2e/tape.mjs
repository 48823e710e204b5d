// A long tape (BUB_TAPE, BUB_TAPE_TOTAL entries, anchors every so often,
// one entry holding the word BUB_NEEDLE, far back): the newest page first,
// Older and Newer, an anchor jumped to, a search (further back), the export.
import { check, equal, login, need, newPage, scenario, step } from "./lib.mjs";

const name = need("BUB_TAPE");
const total = Number(need("BUB_TAPE_TOTAL"));
const needle = need("BUB_NEEDLE");

const ids = (page) => page.locator("#tape-out tbody tr td:first-child").allTextContents().then((cells) => cells.map(Number));

await scenario("tape", async (browser) => {
  const page = await newPage(browser);
  await login(page);
  const started = Date.now();
  await page.goto(new URL(`#tape/${encodeURIComponent(name)}`, page.url()).href);
  await page.locator("#tape-out tbody tr").first().waitFor();
  console.log(`newest page in ${Date.now() - started} ms`);
  const newest = await ids(page);
  equal(Math.max(...newest), total, "the newest page ends at the last entry");
  check(await page.locator("#tape-newer").isDisabled(), "nothing is newer than the newest page");
  check((await page.locator("#tape-info").textContent()).includes(`${total} entries`), "the total is shown");
  await step(page, "newest");

  await page.getByRole("button", { name: "Older" }).click();
  await page.waitForFunction((top) => Number(document.querySelector("#tape-out tbody tr td")?.textContent) < top, Math.min(...newest));
  const older = await ids(page);
  equal(Math.max(...older), Math.min(...newest) - 1, "Older continues right before the page");
  await step(page, "older");
  await page.getByRole("button", { name: "Newer" }).click();
  await page.waitForFunction((last) => [...document.querySelectorAll("#tape-out tbody tr td:first-child")].some((cell) => Number(cell.textContent) === last), total);
  equal(JSON.stringify(await ids(page)), JSON.stringify(newest), "Newer returns to the newest page");

  const anchors = page.locator("#tape-anchors li button");
  await anchors.first().waitFor();
  check(await anchors.count() >= 2, "the anchors are listed");
  const anchor = anchors.nth(1);
  const anchorId = Number(/#(\d+)/.exec(await anchor.textContent())[1]);
  await anchor.click();
  const highlighted = page.locator("#tape-out tr.highlight");
  await highlighted.waitFor();
  equal(Number(await highlighted.locator("td").first().textContent()), anchorId, "the anchor's row is marked");
  check(await highlighted.isVisible(), "the anchor's row is in view");
  await step(page, "anchor");

  await page.getByLabel("Search this tape").fill(needle);
  await page.getByRole("button", { name: "Search" }).click();
  // A search reads a window of the tape per call: further back until the needle shows.
  const hit = page.locator("#tape-out tbody tr", { hasText: needle }).first();
  for (let round = 0; round < 10 && !(await hit.isVisible()); round += 1) {
    const further = page.getByRole("button", { name: "Search further back" });
    await Promise.race([hit.waitFor(), further.waitFor()]);
    if (await hit.isVisible()) break;
    await further.click();
    console.log("searched further back");
  }
  await hit.waitFor();
  check((await page.locator("#tape-info").textContent()).includes(needle), "the search is named");
  await step(page, "search");

  const href = await page.getByRole("link", { name: /Export/ }).getAttribute("href");
  check(href.endsWith(`api/tape/export?${new URLSearchParams({ name })}`), `the export link: ${href}`);
  const exported = await page.request.get(new URL(href, page.url()).href);
  equal(exported.status(), 200, "the export's status");
  const lines = (await exported.text()).split("\n").filter(Boolean);
  equal(lines.length, total, "the export has every entry");
  JSON.parse(lines[0]);
  console.log(`exported ${lines.length} lines`);
});
