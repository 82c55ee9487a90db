// A dropped connection is shown as such, and Retry recovers.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('network loss shows a clear error and Retry runs again', async ({ page }, testInfo) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.setSettings({ maxTokens: 2, ignoreEos: true });
  await page.route('**/api/generate', (route) => route.abort('connectionreset'));
  await pg.generate.click();
  await pg.expectState('error');
  await expect(pg.status).toContainText('Connection lost');
  await expect(pg.runError).toBeVisible();
  await pg.snap(testInfo, 'network-lost');

  await page.unroute('**/api/generate');
  await pg.retry.click();
  await pg.expectState('done');
  await expect(pg.runError).toHaveCount(0);
});
