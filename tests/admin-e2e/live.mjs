// The live charts while the test sends a load of messages: samples arrive
// every second, the replica is named, the turns chart rises above zero;
// then the load's chats are listed and one opens at its tape.
import { check, equal, login, newPage, scenario, step } from "./lib.mjs";

await scenario("live", async (browser) => {
  const page = await newPage(browser);
  await login(page);
  await page.goto(new URL("#live", page.url()).href);
  await page.locator("#live-replica").waitFor();
  equal(await page.locator("#live-replica").textContent(), "single", "the replica");
  const points = () => page.locator("#chart-turns polyline").getAttribute("points");
  const first = await points();
  await step(page, "started");
  await page.waitForFunction(() => {
    const figure = document.getElementById("chart-turns");
    return Number(figure.dataset.samples) >= 3 && Number(figure.querySelector(".now").textContent) > 0;
  }, null, { timeout: 30_000 });
  check((await points()) !== first, "the turns line moved");
  const turns = await page.locator("#chart-turns .now").textContent();
  console.log(`turns/s now ${turns}`);
  await step(page, "moving");
  // The load's chats are listed; one opens at its tape.
  await page.getByRole("link", { name: "Chats" }).click();
  const row = page.locator("#chats-out tbody tr", { hasText: "load-" }).first();
  await row.waitFor();
  check(Number(await row.locator("td.number").textContent()) > 0, `the chat has messages: ${await row.textContent()}`);
  await step(page, "chats");
  await row.getByRole("link", { name: /^Open the tape of load-/ }).click();
  await page.locator("#tape-out tbody tr").first().waitFor();
  check((await page.locator("#tape-out").textContent()).includes("hello"), "the chat's tape holds its messages");
  await step(page, "chat-tape");
});
