// A full queue ("busy") says when to try again; the page stays usable.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

test('a busy server shows when to retry', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await pg.open();
  // The real queue needs max_queue+1 slow requests to fill; answer as the server does when full.
  await page.route('**/api/generate', (route) =>
    route.fulfill({
      status: 429,
      headers: { 'retry-after': '3' },
      contentType: 'application/json',
      body: JSON.stringify({ code: 'busy', message: 'the server is busy: 16 requests are waiting; try again shortly', retry_after_ms: 3000 }),
    }));
  await pg.generate.click();
  await pg.expectState('error');
  await expect(pg.status).toContainText('Server busy: try again in 3 s');
  await expect(pg.retry).toBeEnabled();
  await expect(pg.generate).toBeEnabled();
  await pg.snap(testInfo, 'busy');
});
