// The takeover page in Chromium (tests/tests/takeover.rs): opens the link,
// presses "Open terminal", types at the shell through xterm.js and reads what
// the DOM renderer shows (.xterm-rows), then opens the same link again.
// With `idleUrl`, opens that link's terminal and types nothing until psbx
// closes it; with `ownerUrl`, opens that one, lists the box's terminals and
// closes them through the API (`api`: {base, key, boxId}), as the owner.
// Arguments: {url, holdMs, idleUrl, ownerUrl, api}.
import { launch, run } from './lib.mjs';

/// Opens `url`'s page and, after checking that loading it spent nothing,
/// presses "Open terminal" and waits until it is connected.
async function openTerminal(context, url, seen) {
  const page = await context.newPage();
  const response = await page.goto(url);
  seen.status = response.status();
  seen.csp = response.headers()['content-security-policy'];
  seen.referrerPolicy = response.headers()['referrer-policy'];
  seen.readyBeforeClick = (await page.$eval('#status', (s) => s.dataset.state)) === 'ready';
  // Scripts ran, and the link is still unspent: its page answers 200 again.
  await page.waitForTimeout(1500);
  seen.unspentBeforeClick = (await context.request.get(url)).status();
  await page.click('#open');
  await page.waitForSelector('#status[data-state="connected"]', { timeout: 60000 });
  return page;
}

async function closedReason(page, timeout) {
  await page.waitForSelector('#status[data-state="closed"]', { timeout });
  return page.$eval('#status', (s) => s.textContent);
}

run(async ({ url, holdMs, idleUrl, ownerUrl, api }) => {
  const { browser, context } = await launch();
  const seen = {};
  try {
    const page = await openTerminal(context, url, seen);
    const lines = () =>
      page.$eval('.xterm-rows', (rows) =>
        Array.from(rows.children).map((r) => r.textContent.replace(/\u00a0/g, ' ').trimEnd()),
      );
    const waitFor = async (want, what) => {
      const end = Date.now() + 60000;
      while (Date.now() < end) {
        if ((await lines()).some((l) => l.trim() === want)) return;
        await page.waitForTimeout(200);
      }
      throw new Error(`no line "${want}" (${what}) in the terminal:\n${(await lines()).join('\n')}`);
    };
    const command = async (text) => {
      await page.keyboard.type(text);
      await page.keyboard.press('Enter');
    };
    await page.click('#terminal');
    await command('echo $((6*7))');
    await waitFor('42', 'arithmetic');
    seen.answered = true;

    await command('echo é-ü');
    await waitFor('é-ü', 'UTF-8');
    seen.utf8 = true;

    await command('sleep 100');
    await page.waitForTimeout(1500);
    await page.keyboard.press('Control+C');
    await command('echo back-$((1+1))');
    await waitFor('back-2', 'the prompt after Ctrl-C');
    seen.interrupted = true;

    await page.setViewportSize({ width: 700, height: 420 });
    await page.waitForTimeout(1000);
    const size = await page.evaluate(() => [window.psbxTerminal.rows, window.psbxTerminal.cols]);
    await command('stty size');
    await waitFor(`${size[0]} ${size[1]}`, 'stty size after a resize');
    seen.resized = size;

    // The box stays awake while the terminal is open (the test's idle_freeze is shorter).
    await page.waitForTimeout(holdMs);
    await command('echo still-$((2+3))');
    await waitFor('still-5', 'the terminal after the hold');
    seen.stillConnected =
      (await page.$eval('#status', (s) => s.dataset.state)) === 'connected';

    const again = await context.newPage();
    const second = await again.goto(url);
    seen.againStatus = second.status();
    seen.againText = await again.$eval('h1', (h) => h.textContent);
    await page.close();

    if (idleUrl) {
      const idle = await openTerminal(context, idleUrl, {});
      seen.idleClosed = await closedReason(idle, 120000);
    }
    if (ownerUrl) {
      const owned = await openTerminal(context, ownerUrl, {});
      const headers = { authorization: `Bearer ${api.key}` };
      const terminals = `${api.base}/v1/boxes/${api.boxId}/terminals`;
      seen.listed = await (await context.request.get(terminals, { headers })).json();
      const closed = await context.request.delete(terminals, { headers });
      seen.ownerClose = { status: closed.status(), body: await closed.json() };
      seen.ownerClosed = await closedReason(owned, 30000);
      seen.listedAfter = await (await context.request.get(terminals, { headers })).json();
    }
  } finally {
    await browser.close();
  }
  return seen;
});
