// The person's side of a review in psbx's app (/app), in Chromium: signs in
// with a password, finds the review under "Ready for you", opens it, picks
// the first screenshot, draws a circle on it (pointer moves around a centre
// point), types what is wrong (the draft survives a reload), adds it and
// sends; with `shutDown`, presses "Shut down" on the review's box (accepting
// the confirm) and waits until /app shows it stopped.
// With `takeShot` ("phone" or "desktop"), first presses "Take a screenshot"
// of the review's first page at that size.
// Arguments: {baseUrl, account, password, reviewTitle, text, shutDown, takeShot}.
// Prints {ok, circle: {cx, cy, r} (image pixels), boxId, reviewId, draftKept,
// state (the review's after sending), boxState, csp, shotsBefore, shotsAfter}.
import { launch, run } from './lib.mjs';

run(async ({ baseUrl, account, password, reviewTitle, text, shutDown, takeShot }) => {
  const { browser, context } = await launch();
  const seen = { ok: false };
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(30000);
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));

    await page.goto(`${baseUrl}/app`);
    if (!new URL(page.url()).pathname.startsWith('/app/sign-in')) {
      throw new Error(`/app did not ask to sign in: ${page.url()}`);
    }
    await page.fill('#account', account);
    await page.fill('#password', password);
    await Promise.all([page.waitForURL(`${baseUrl}/app`), page.click('button[type=submit]')]);

    const card = page.locator('#waiting .review-card', { hasText: reviewTitle });
    if ((await card.count()) !== 1) {
      throw new Error(`"${reviewTitle}" is not under Ready for you:\n${await page.content()}`);
    }
    seen.reviewId = await card.getAttribute('data-review');
    const response = await Promise.all([page.waitForNavigation(), card.locator('a').click()]);
    seen.csp = response[0] && response[0].headers()['content-security-policy'];
    seen.boxId = await page.getAttribute('#review', 'data-box');

    if (takeShot) {
      seen.shotsBefore = await page.locator('#shots li').count();
      await page.check(`input[name="viewport"][value="${takeShot}"]`);
      await Promise.all([page.waitForNavigation(), page.click('#shoot button[type=submit]')]);
      seen.shotsAfter = await page.locator('#shots li').count();
    }

    // The first screenshot, drawn on.
    await page.click('button.annotate >> nth=0');
    await page.waitForSelector('#editor[data-ready="true"]');
    const canvas = page.locator('#editor-canvas');
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    const natural = await canvas.evaluate((c) => [c.width, c.height]);
    const scale = natural[0] / box.width;
    const centre = [box.x + box.width / 2, box.y + box.height / 2];
    const radius = Math.min(box.width, box.height) / 4;
    const steps = 48;
    await page.mouse.move(centre[0] + radius, centre[1]);
    await page.mouse.down();
    for (let i = 1; i <= steps; i++) {
      const a = (2 * Math.PI * i) / steps;
      await page.mouse.move(centre[0] + radius * Math.cos(a), centre[1] + radius * Math.sin(a));
    }
    await page.mouse.up();
    seen.circle = {
      cx: Math.round((centre[0] - box.x) * scale),
      cy: Math.round((centre[1] - box.y) * scale),
      r: Math.round(radius * scale),
    };

    // The words, kept over a reload (the drawing is redone after it).
    await page.fill('#item-text', text);
    await page.reload();
    seen.draftKept = (await page.inputValue('#item-text')) === text;
    await page.click('button.annotate >> nth=0');
    await page.waitForSelector('#editor[data-ready="true"]');
    const again = await canvas.boundingBox();
    await page.mouse.move(again.x + again.width / 2 + radius, again.y + again.height / 2);
    await page.mouse.down();
    for (let i = 1; i <= steps; i++) {
      const a = (2 * Math.PI * i) / steps;
      await page.mouse.move(
        again.x + again.width / 2 + radius * Math.cos(a),
        again.y + again.height / 2 + radius * Math.sin(a),
      );
    }
    await page.mouse.up();

    await page.click('#add-item');
    await page.waitForSelector('#items li');
    seen.items = await page.locator('#items li').count();
    await Promise.all([page.waitForNavigation(), page.click('#send')]);
    await page.waitForSelector('#review[data-state="answered"]');
    seen.state = await page.getAttribute('#review', 'data-state');
    seen.sentText = await page.locator('#sent-items li').first().innerText();

    if (shutDown) {
      await page.goto(`${baseUrl}/app`);
      const item = page.locator(`li.box[data-box="${seen.boxId}"]`);
      page.once('dialog', (d) => d.accept());
      await Promise.all([page.waitForNavigation(), item.locator('button.danger').click()]);
      const end = Date.now() + 60000;
      for (;;) {
        seen.boxState = await page.getAttribute(`li.box[data-box="${seen.boxId}"]`, 'data-state');
        if (seen.boxState === 'stopped' || Date.now() > end) break;
        await page.waitForTimeout(500);
        await page.reload();
      }
      if (seen.boxState !== 'stopped') throw new Error(`the box shows ${seen.boxState}, not stopped`);
    }
    seen.errors = errors;
    seen.ok = errors.length === 0;
  } finally {
    await browser.close();
  }
  return seen;
});
