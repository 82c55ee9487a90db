// Three pages on a server that decodes two requests at once (--max-batch 2, see
// playwright.config.ts): the first two run side by side, each with its own counters
// (ignore_eos and a long max_tokens, so neither can end early); the third shows its
// queue position, then runs once the first is stopped.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('two requests run together, a third shows its queue position, then runs', async ({ browser }, testInfo) => {
  test.setTimeout(3 * RUN_TIMEOUT);
  const page = async () => new Playground(await (await browser.newContext()).newPage());
  const [first, second, third] = [await page(), await page(), await page()];
  for (const pg of [first, second, third]) await pg.open();
  await first.setSettings({ maxTokens: 1000, ignoreEos: true });
  await second.setSettings({ maxTokens: 1000, ignoreEos: true });
  await third.setSettings({ maxTokens: 4, ignoreEos: true });

  await first.generate.click();
  await expect.poll(() => first.number(first.tokens), { timeout: RUN_TIMEOUT }).toBeGreaterThanOrEqual(1);
  await second.generate.click();
  await expect.poll(() => second.number(second.tokens), { timeout: RUN_TIMEOUT }).toBeGreaterThanOrEqual(1);
  // Both streams advance while the other runs: neither waits for the other.
  const firstBefore = await first.number(first.tokens);
  const secondBefore = await second.number(second.tokens);
  await expect.poll(async () => (await first.number(first.tokens)) > firstBefore && (await second.number(second.tokens)) > secondBefore,
    { timeout: RUN_TIMEOUT }).toBe(true);

  await third.generate.click();
  await third.expectState('queued');
  await expect(third.status).toContainText(/Queued/);
  await expect(third.status).toHaveAttribute('data-queue-position', /^\d+$/);
  await third.snap(testInfo, 'queued');

  await first.stop.click();
  await first.expectState('stopped');
  await third.expectState('done');
  expect(await third.number(third.tokens)).toBe(4);
  await second.stop.click();
  await second.expectState('stopped');
});
