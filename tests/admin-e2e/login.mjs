// Logs in (a wrong token first: refused), walks every section by the
// keyboard and the nav, in light and dark, and logs out.
import { check, console_url, equal, login, need, newPage, scenario, step } from "./lib.mjs";

const SECTIONS = ["policy", "explain", "chats", "pairing", "live", "audit"];

await scenario("login", async (browser) => {
  const url = console_url();
  const page = await newPage(browser);
  await page.goto(`${url}/`);
  await step(page, "form");

  await page.getByLabel("Admin token").fill(`${need("BUB_TOKEN")}X`);
  const [refused] = await Promise.all([
    page.waitForResponse((response) => response.url().endsWith("/login")),
    page.getByRole("button", { name: "Log in" }).click(),
  ]);
  equal(refused.status(), 401, "a wrong token's answer");
  await page.getByRole("alert").filter({ hasText: "That is not an admin token." }).waitFor();
  check(!(await page.context().cookies()).some((cookie) => cookie.name === "bub_admin"), "no cookie after a wrong token");
  await step(page, "wrong-token");

  await login(page);
  const who = await page.locator("#who").textContent();
  check(who.includes("alice") && who.includes("replica single"), `the header names the admin and replica: ${who}`);
  await step(page, "console");

  // The keyboard: the skip link comes first and moves focus to the content.
  await page.keyboard.press("Tab");
  equal(await page.evaluate(() => document.activeElement.textContent), "Skip to content", "the first stop");
  await page.keyboard.press("Enter");
  equal(await page.evaluate(() => document.activeElement.id), "main", "focus after the skip link");
  // Every section by its nav link; each shows itself (or the API's error), never a broken page.
  for (const name of SECTIONS) {
    await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name, exact: false }).first().click();
    await page.locator(`#view-${name}`).waitFor({ state: "visible" });
    equal(new URL(page.url()).hash, `#${name}`, "the route");
    equal(await page.locator("main > section:visible").count(), 1, "one section at a time");
    equal(await page.locator(`nav a[aria-current=page]`).getAttribute("data-view"), name, "the nav marks the section");
    await page.waitForLoadState("networkidle").catch(() => {});
    await step(page, name);
  }
  // The policy editor's controls are real, labelled controls.
  await page.goto(`${url}/#policy`);
  await page.getByLabel("Config file").waitFor();
  for (const name of ["Check", "Preview", "Apply"]) await page.getByRole("button", { name, exact: true }).waitFor();

  await page.emulateMedia({ colorScheme: "dark" });
  const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  equal(background, "rgb(13, 17, 23)", "the dark background");
  await step(page, "dark");
  await page.emulateMedia({ colorScheme: "light" });

  await Promise.all([page.waitForEvent("load"), page.getByRole("button", { name: "Log out" }).click()]);
  await page.getByLabel("Admin token").waitFor();
  await step(page, "logged-out");
});
