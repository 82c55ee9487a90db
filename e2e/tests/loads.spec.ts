// The playground loads in a real browser: WASM boots and renders the product name.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

test('the playground renders the product name without console errors', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await pg.open();
  await expect(pg.title).toHaveText('Peregrine');
  await expect(page).toHaveTitle(/Peregrine/);
  await testInfo.attach('playground', { body: await page.screenshot(), contentType: 'image/png' });
  expect(pg.consoleErrors).toEqual([]);
});

test('unknown client-side routes fall back to the playground', async ({ page }) => {
  const pg = new Playground(page);
  await pg.open('/s/some-share-id');
  await expect(pg.title).toHaveText('Peregrine');
});
