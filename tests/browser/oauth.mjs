// The OAuth sign-in page as a person uses it, in Chromium: opens an MCP
// client's authorize link, types the account name and password, presses
// Approve, and reads the code off the redirect to the client (the test's
// loopback listener at the redirect URI answers it). With
// `loginLink`, first opens that one-time link and presses "Sign in" on its
// confirmation page, then approves the authorize page without a password.
// With `crossSite`, an attacker's page on another origin (served by the
// browser itself) posts the same form, hidden fields and all, and the answer
// is read.
// Arguments: {authorizeUrl, redirectUri, account, password, loginLink, crossSite}.
// Prints {ok, code, state, iss, error, linkSignedIn, crossSite: {status, text}}.
import { launch, run } from './lib.mjs';

run(async ({ authorizeUrl, redirectUri, account, password, loginLink, crossSite }) => {
  const { browser, context } = await launch();
  const seen = { ok: false };
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(30000);

    if (loginLink) {
      await page.goto(loginLink);
      await Promise.all([page.waitForNavigation(), page.click('button.approve')]);
      seen.linkSignedIn = !(await page.content()).includes('sent from another site');
    }

    await page.goto(authorizeUrl);
    if (!loginLink) {
      await page.fill('#account', account);
      await page.fill('#password', password);
    }
    await Promise.all([
      page.waitForURL(`${redirectUri}**`),
      page.click('button.approve'),
    ]);
    const back = new URL(page.url());
    seen.code = back.searchParams.get('code');
    seen.state = back.searchParams.get('state');
    seen.iss = back.searchParams.get('iss');
    seen.error = back.searchParams.get('error');

    if (crossSite) {
      // The real form's fields, posted from a page of another origin.
      await page.goto(authorizeUrl);
      const fields = await page.$$eval('form input[type=hidden]', (inputs) =>
        inputs.map((i) => [i.name, i.value]));
      const target = new URL('/oauth/authorize', authorizeUrl).toString();
      const attacker = 'http://attacker.test/';
      const inputs = fields
        .concat([['account', account], ['password', password], ['decision', 'approve']])
        .map(([n, v]) => `<input type="hidden" name="${n}" value="${v.replace(/"/g, '&quot;')}">`)
        .join('');
      // no-referrer: the browser sends `Origin: null`, the case a same-origin
      // form on such a page also gives; only Sec-Fetch-Site tells them apart.
      await context.route(`${attacker}**`, (route) => route.fulfill({
        status: 200,
        contentType: 'text/html',
        headers: { 'Referrer-Policy': 'no-referrer' },
        body: `<form id="f" method="post" action="${target}">${inputs}</form>`,
      }));
      await page.goto(attacker);
      const [response] = await Promise.all([
        page.waitForNavigation(),
        page.evaluate(() => document.getElementById('f').submit()),
      ]);
      seen.crossSite = { status: response ? response.status() : null, text: await page.innerText('body') };
    }
    seen.ok = true;
    return seen;
  } finally {
    await browser.close();
  }
});
