// A server started with --api-key: the playground asks for the key, says when a key
// is refused, then loads and streams with it, and remembers it across a reload.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

// The port and key playwright.config.ts starts the key-guarded server with.
const keyPort = Number(process.env.PEREGRINE_E2E_KEY_PORT ?? 18083);
const KEY = 'e2e-key-5c1f';
test.use({ baseURL: `http://127.0.0.1:${keyPort}` });

test('the playground asks for the API key and runs with it', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await page.goto('/');
  const form = page.getByTestId('api-key-form');
  const message = page.getByTestId('api-key-message');
  const input = page.getByTestId('api-key-input');
  await expect(form).toBeVisible();
  await expect(message).toContainText('Enter the key');
  await expect(pg.backend).toContainText('API key needed');
  await pg.snap(testInfo, 'asks-for-key');

  await input.fill('not-the-key');
  await page.getByTestId('api-key-save').click();
  await expect(message).toContainText('The saved key was refused (the API key is not valid for this server).');

  await input.fill(KEY);
  await page.getByTestId('api-key-save').click();
  await expect(form).toBeHidden();
  await expect(pg.backend).toContainText('lane-head-lane-norms-window');
  await pg.setPrompt('the cat sat on');
  await pg.setSettings({ maxTokens: 8, ignoreEos: true, temperature: 0 });
  await pg.generate.click();
  await pg.expectState('done');
  await expect(pg.tokens).toHaveText('8');

  // The key is remembered: a reload asks nothing.
  await pg.open();
  await expect(form).toBeHidden();
  const unexpected = pg.consoleErrors.filter((e) => !e.includes('401'));
  expect(unexpected).toEqual([]);
});
