// Invalid settings are caught in the form: each field says what is wrong, Generate
// sends nothing and focuses the first bad field.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

test('invalid settings are caught in the form, not by the server', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await pg.open();
  const sent: string[] = [];
  page.on('request', (r) => { if (r.url().includes('/api/generate')) sent.push(r.url()); });

  await pg.setSettings({ maxTokens: 0, temperature: 'hot', topP: 1.5, seed: '-1' });
  await expect(page.getByTestId('max-tokens-error')).toContainText('1 to 4096');
  await expect(page.getByTestId('temperature-error')).toContainText('0 to 2');
  await expect(page.getByTestId('top-p-error')).toContainText('at most 1');
  await expect(page.getByTestId('seed-error')).toContainText('whole number');
  await expect(pg.maxTokens).toHaveAttribute('aria-invalid', 'true');

  await pg.generate.click();
  await expect(pg.settingsError).toBeVisible();
  await expect(pg.maxTokens).toBeFocused();
  await expect(pg.status).toHaveAttribute('data-state', 'idle');
  await pg.snap(testInfo, 'settings-invalid');

  await pg.setSettings({ maxTokens: 4097 });
  await expect(page.getByTestId('max-tokens-error')).toContainText('1 to 4096');
  await pg.setSettings({ maxTokens: 8, temperature: 0.7, topP: 0.9, seed: '' });
  await expect(page.getByTestId('max-tokens-error')).toBeEmpty();
  await expect(page.getByTestId('temperature-error')).toBeEmpty();
  await expect(pg.maxTokens).toHaveAttribute('aria-invalid', 'false');
  await expect(pg.settingsError).toHaveCount(0);
  // An empty prompt is caught too.
  await pg.setPrompt('   ');
  await pg.generate.click();
  await expect(page.getByTestId('prompt-error')).toHaveText('Write a prompt first.');
  await expect(pg.prompt).toBeFocused();
  expect(sent).toEqual([]);
});
