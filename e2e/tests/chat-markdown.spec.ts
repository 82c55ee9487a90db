// Chat mode renders the answer as sanitised markdown (no live HTML from the model).
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('chat answers render as markdown', async ({ page }, testInfo) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.examples.selectOption({ label: 'Chat: processes and threads' });
  await expect(pg.mode.getByLabel('Chat')).toBeChecked();
  await pg.setSettings({ maxTokens: 12, ignoreEos: true });
  await pg.runToDone();
  await expect(pg.output).toHaveClass(/markdown/);
  await expect(pg.output).not.toBeEmpty();
  await expect(pg.output.locator('script, img, iframe')).toHaveCount(0);
  await pg.snap(testInfo, 'chat-done');
});
