// Opens a box URL of psbx-box-web's page in Chromium and reports what the
// page saw: its WebSocket echo, the arrival times of its server-sent events,
// and a large download read as a stream.
//
// args: {url, sseCount, sseEveryMs, downloadBytes}
import { launch, run } from './lib.mjs';

run(async ({ url, sseCount = 5, sseEveryMs = 400, downloadBytes = 0 }) => {
  const { browser, context } = await launch();
  try {
    const page = await context.newPage();
    const response = await page.goto(url);
    const title = await page.textContent('#title');
    await page.waitForFunction(
      () => document.querySelector('#echo').textContent.startsWith('hello-'),
      null,
      { timeout: 30000 },
    );
    const echo = await page.textContent('#echo');
    const sse = await page.evaluate(
      ({ count, every }) =>
        new Promise((resolve, reject) => {
          const times = [];
          const data = [];
          const source = new EventSource(`/sse?count=${count}&every_ms=${every}`);
          source.onmessage = (e) => {
            times.push(performance.now());
            data.push(e.data);
            if (data.length === count) {
              source.close();
              resolve({ times, data });
            }
          };
          source.onerror = () => {
            if (data.length < count) {
              source.close();
              reject(new Error(`the event stream failed after ${data.length} events`));
            }
          };
        }),
      { count: sseCount, every: sseEveryMs },
    );
    let download = null;
    if (downloadBytes > 0) {
      download = await page.evaluate(async (n) => {
        const started = performance.now();
        const r = await fetch(`/bytes?n=${n}`);
        const reader = r.body.getReader();
        let total = 0;
        let patternOk = true;
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          // Spot-check the pattern (byte i is i % 251) at each chunk's start.
          if (value.length && value[0] !== total % 251) patternOk = false;
          total += value.length;
        }
        return { status: r.status, total, patternOk, ms: performance.now() - started };
      }, downloadBytes);
    }
    return { status: response.status(), title, echo, sse, download };
  } finally {
    await browser.close();
  }
});
