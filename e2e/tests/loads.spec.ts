// The playground loads in a real browser: WASM boots, renders the product name and
// the backend badge from /api/info, without console errors.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

test('the playground renders with the backend badge and no console errors', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await pg.open();
  await expect(pg.title).toHaveText('Peregrine');
  await expect(page).toHaveTitle(/Peregrine/);
  await expect(pg.backend).toContainText(/^(Running on )?(CPU|\d+× .+) · .+/);
  await expect(pg.prompt).not.toHaveValue('');
  await expect(pg.status).toHaveAttribute('data-state', 'idle');
  await pg.snap(testInfo, 'idle');
  expect(pg.consoleErrors).toEqual([]);
});

test('the page runs under its content security policy (inline loader by hash, no framing)', async ({ page }) => {
  const pg = new Playground(page);
  const response = await page.goto('/');
  const csp = response!.headers()['content-security-policy'];
  expect(csp).toMatch(/script-src 'self' 'wasm-unsafe-eval' 'sha256-[A-Za-z0-9+/=]+'/);
  expect(csp).toContain("frame-ancestors 'none'");
  expect(response!.headers()['x-content-type-options']).toBe('nosniff');
  await expect(pg.backend).toContainText('·');
  expect(pg.consoleErrors).toEqual([]);
});
