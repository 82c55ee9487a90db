// Stop halts generation: at most one more token appears after the click and the
// page is idle again within a second.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('Stop halts the stream and the page is idle within 1 s', async ({ page }, testInfo) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.setSettings({ maxTokens: 1000, ignoreEos: true });
  await pg.generate.click();
  await expect.poll(() => pg.number(pg.tokens), { timeout: RUN_TIMEOUT }).toBeGreaterThanOrEqual(2);

  // Read the token counter at the instant of the click, before the page handles it
  // (a capturing listener on window runs ahead of Leptos's delegated handlers).
  await page.evaluate(() => {
    window.addEventListener('click', (e) => {
      if ((e.target as Element).closest('[data-testid="stop"]')) {
        (window as unknown as { atStop: string }).atStop = document.querySelector('[data-testid="tokens"]')!.textContent!;
      }
    }, { capture: true });
  });
  await pg.stop.click();
  const before = Number(await page.evaluate(() => (window as unknown as { atStop: string }).atStop));
  await expect(pg.status).toHaveAttribute('data-state', 'stopped', { timeout: 1_000 });
  await expect(pg.generate).toBeEnabled({ timeout: 1_000 });
  await expect(pg.stop).toBeDisabled({ timeout: 1_000 });
  await pg.snap(testInfo, 'stopped');

  const after = await pg.number(pg.tokens);
  expect(after).toBeGreaterThanOrEqual(before);
  expect(after).toBeLessThanOrEqual(before + 1);
  expect(after).toBeLessThan(1000);
  // The stopped run is remembered with the figures seen at the stop.
  await expect(pg.recentRuns.first()).toContainText('stopped');
  await expect(pg.recentRuns.first()).toContainText(`${after} tokens`);
  // The engine is free again: a new run goes through.
  await pg.setSettings({ maxTokens: 2 });
  await pg.generate.click();
  await pg.expectState('done');
});
