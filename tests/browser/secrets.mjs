// Settings → Secrets in psbx's app, in Chromium: signs in, opens the gear at
// the top right, then Secrets, adds a secret, and returns the HTML of every
// page it saw (documents as served, and as rendered after each step) so the
// caller can check that the value appears in none.
// Arguments: {baseUrl, account, password, name, value}.
// The browser is phone-sized (390x844): `widest` is the widest page seen
// (its scrollWidth), which should fit the screen.
// Prints {ok, listed, valueFieldAfter, widest, pages: [html...]}.
import { launch, run } from './lib.mjs';

run(async ({ baseUrl, account, password, name, value }) => {
  const { browser, context } = await launch();
  const seen = { ok: false, pages: [] };
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(30000);
    page.on('response', async (response) => {
      if (response.request().resourceType() !== 'document') return;
      try {
        seen.pages.push(await response.text());
      } catch (_) { /* a redirect has no body */ }
    });
    await page.setViewportSize({ width: 390, height: 844 });
    seen.widest = 0;
    const rendered = async () => {
      seen.pages.push(await page.content());
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      seen.widest = Math.max(seen.widest, width);
    };

    await page.goto(`${baseUrl}/app/sign-in`);
    await page.fill('#account', account);
    await page.fill('#password', password);
    await Promise.all([page.waitForURL(`${baseUrl}/app`), page.click('button[type=submit]')]);
    await rendered();
    await Promise.all([page.waitForNavigation(), page.click('a.gear')]);
    await rendered();
    await Promise.all([page.waitForNavigation(), page.click('a[href="/app/settings/secrets"]')]);
    await rendered();
    await page.fill('#secret-name', name);
    await page.fill('#secret-value', value);
    await Promise.all([page.waitForNavigation(), page.click('#add-secret button[type=submit]')]);
    await rendered();
    seen.listed = (await page.locator(`li.secret[data-name="${name}"]`).count()) === 1;
    seen.valueFieldAfter = await page.inputValue('#secret-value');
    seen.ok = seen.listed && seen.valueFieldAfter === '';
  } finally {
    await browser.close();
  }
  return seen;
});
