// The copy button puts the run's output on the clipboard.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('Copy puts the output on the clipboard', async ({ page, context }) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  const pg = new Playground(page);
  await pg.open();
  await expect(pg.copy).toBeDisabled();
  await pg.setSettings({ maxTokens: 4, ignoreEos: true });
  await pg.runToDone();
  await pg.copy.click();
  await expect(pg.copy).toHaveText('Copied');
  const output = await pg.output.textContent();
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(output);
});
