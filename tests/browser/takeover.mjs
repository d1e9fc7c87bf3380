// The takeover page in Chromium (tests/tests/takeover.rs): opens the link,
// types at the shell through xterm.js and reads what the DOM renderer shows
// (.xterm-rows), then opens the same link again. Arguments: {url, holdMs}.
import { launch, run } from './lib.mjs';

run(async ({ url, holdMs }) => {
  const { browser, context } = await launch();
  const seen = {};
  try {
    const page = await context.newPage();
    const response = await page.goto(url);
    seen.status = response.status();
    seen.csp = response.headers()['content-security-policy'];
    seen.referrerPolicy = response.headers()['referrer-policy'];
    await page.waitForSelector('#status[data-state="connected"]', { timeout: 60000 });
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
  } finally {
    await browser.close();
  }
  return seen;
});
