// Opening a share link whose id does not exist says so clearly and leaves a
// working playground.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

test('an unknown share id shows a clear message', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await pg.open('/s/no-such-share-0000');
  await expect(pg.shareMissing).toBeVisible();
  await expect(pg.shareMissing).toContainText('not found');
  await expect(pg.shareMissing).toContainText('no-such-share-0000');
  await expect(pg.sharedRun).toHaveCount(0);
  await expect(pg.generate).toBeEnabled();
  await pg.snap(testInfo, 'share-missing');
});
