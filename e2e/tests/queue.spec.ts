// Two pages at once: the second shows its queue position while the first runs
// (ignore_eos and a long max_tokens, so the first cannot end early), then runs
// itself once the first is stopped.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('a second request shows its queue position, then runs', async ({ browser }, testInfo) => {
  test.setTimeout(3 * RUN_TIMEOUT);
  const first = new Playground(await (await browser.newContext()).newPage());
  const second = new Playground(await (await browser.newContext()).newPage());
  await first.open();
  await second.open();
  await first.setSettings({ maxTokens: 1000, ignoreEos: true });
  await second.setSettings({ maxTokens: 4, ignoreEos: true });

  await first.generate.click();
  await expect.poll(() => first.number(first.tokens), { timeout: RUN_TIMEOUT }).toBeGreaterThanOrEqual(1);
  await second.generate.click();
  await second.expectState('queued');
  await expect(second.status).toContainText(/Queued/);
  await expect(second.status).toHaveAttribute('data-queue-position', /^\d+$/);
  await second.snap(testInfo, 'queued');

  await first.stop.click();
  await first.expectState('stopped');
  await second.expectState('done');
  expect(await second.number(second.tokens)).toBe(4);
});
