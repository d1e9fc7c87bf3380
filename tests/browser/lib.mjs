// The browser tests' shared part: Debian's Chromium (/usr/bin/chromium,
// never a downloaded browser) driven by playwright-core, and the one-JSON-line
// protocol with the Rust side (psbx_tests::browser): a script gets its
// arguments as one JSON object in argv[2] and prints one JSON object; a
// failure prints the error to stderr and exits non-zero.
import { chromium } from 'playwright-core';
import { existsSync } from 'node:fs';

export const CHROMIUM = process.env.PSBX_CHROMIUM || '/usr/bin/chromium';

/// A headless Chromium. Names under `resolve` (host -> address) are mapped by
/// Chromium's resolver, so box URLs of any domain reach the test's server.
export async function launch({ resolve = {}, ignoreHttpsErrors = false } = {}) {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: run scripts/setup (it installs Debian's chromium)`);
  }
  const rules = Object.entries(resolve).map(([host, addr]) => `MAP ${host} ${addr}`);
  const args = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'];
  if (rules.length) args.push(`--host-resolver-rules=${rules.join(', ')}`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args });
  const context = await browser.newContext({ ignoreHTTPSErrors: ignoreHttpsErrors });
  return { browser, context };
}

/// Runs `main(args)` and prints what it returns as one JSON line.
export function run(main) {
  const args = JSON.parse(process.argv[2] || '{}');
  main(args).then(
    (result) => {
      process.stdout.write(JSON.stringify(result) + '\n');
      process.exit(0);
    },
    (err) => {
      process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
      process.exit(1);
    },
  );
}
