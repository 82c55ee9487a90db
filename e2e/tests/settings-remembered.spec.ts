// Settings, mode and prompt are remembered in localStorage across visits.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

test('settings are remembered after a reload', async ({ page }) => {
  const pg = new Playground(page);
  await pg.open();
  await pg.setPrompt('SELECT name FROM users WHERE');
  await pg.mode.getByLabel('Chat').check();
  await pg.setSettings({ maxTokens: 33, temperature: 0.25, topP: 0.8, seed: 7, ignoreEos: true });
  await page.reload();
  await expect(pg.backend).toContainText('·');
  await expect(pg.prompt).toHaveValue('SELECT name FROM users WHERE');
  await expect(pg.mode.getByLabel('Chat')).toBeChecked();
  await expect(pg.maxTokens).toHaveValue('33');
  await expect(pg.temperature).toHaveValue('0.25');
  await expect(pg.topP).toHaveValue('0.8');
  await expect(pg.seed).toHaveValue('7');
  await expect(pg.ignoreEos).toBeChecked();
});
