// Keyboard shortcuts: Tab indents in the editor, Esc then Tab leaves it,
// Ctrl+Enter runs and Esc stops.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('Tab indents, Ctrl+Enter runs, Esc stops', async ({ page }, testInfo) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.setSettings({ maxTokens: 1000, ignoreEos: true });
  await pg.setPrompt('def greet(name):\n');
  await pg.prompt.press('End');
  await page.keyboard.press('Control+End');
  await page.keyboard.press('Tab');
  await expect(pg.prompt).toHaveValue('def greet(name):\n    ');
  await expect(pg.prompt).toBeFocused();
  await page.keyboard.type('return');
  await expect(pg.prompt).toHaveValue('def greet(name):\n    return');

  await page.keyboard.press('Control+Enter');
  await expect.poll(() => pg.number(pg.tokens), { timeout: RUN_TIMEOUT }).toBeGreaterThanOrEqual(1);
  await expect(pg.prompt).toBeFocused();
  await page.keyboard.press('Escape');
  await expect(pg.status).toHaveAttribute('data-state', 'stopped', { timeout: 1_000 });
  await pg.snap(testInfo, 'keyboard-stopped');

  // Esc armed "leave": the next Tab moves focus out instead of indenting.
  await page.keyboard.press('Tab');
  await expect(pg.prompt).not.toBeFocused();
  await expect(pg.prompt).toHaveValue('def greet(name):\n    return');
});
