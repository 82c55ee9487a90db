// A finished run is listed under recent runs with its speed, and stays after a reload.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('recent runs keep their speeds across reloads', async ({ page }) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.setSettings({ maxTokens: 3, ignoreEos: true });
  await pg.runToDone();
  const tokPerS = await pg.tokPerS.textContent();
  await expect(pg.recentRuns).toHaveCount(1);
  await expect(pg.recentRuns.first()).toContainText(`${tokPerS} tok/s`);
  await expect(pg.recentRuns.first()).toContainText('3 tokens');
  await page.reload();
  await expect(pg.recentRuns).toHaveCount(1);
  await expect(pg.recentRuns.first()).toContainText(`${tokPerS} tok/s`);
});
