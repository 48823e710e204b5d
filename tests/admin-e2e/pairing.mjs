// A pairing request (a direct message from a stranger got BUB_PAIRING_CODE)
// approved in the console; the list then says so.
import { check, equal, login, need, newPage, scenario, step } from "./lib.mjs";

const code = need("BUB_PAIRING_CODE");
const who = need("BUB_PAIRING_SUBJECT");

await scenario("pairing", async (browser) => {
  const page = await newPage(browser);
  await login(page);
  await page.goto(new URL("#pairing", page.url()).href);
  const row = page.locator("#pairing-out tbody tr", { hasText: who });
  await row.waitFor();
  check((await row.textContent()).includes("pending"), `the request is pending: ${await row.textContent()}`);
  await step(page, "pending");
  const field = row.getByRole("textbox");
  if (!(await field.inputValue())) await field.fill(code);
  equal(await field.inputValue(), code, "the code to approve");
  await row.getByRole("button", { name: "Approve" }).click();
  await page.locator("#pairing-status .good").filter({ hasText: "Approved" }).waitFor();
  await page.waitForFunction((subject) => [...document.querySelectorAll("#pairing-out tbody tr")]
    .some((tr) => tr.textContent.includes(subject) && !tr.textContent.includes("pending")), who);
  await step(page, "approved");
  console.log("approved");
});
