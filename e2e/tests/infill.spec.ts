// Fill in the middle: on a model with FIM tokens (the third server of
// playwright.config.ts) the caret splits the editor, the middle streams in place
// between the two parts, and a share link keeps both; the default model has no FIM
// tokens, and the page says so instead of offering the mode.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

const fimPort = Number(process.env.PEREGRINE_E2E_FIM_PORT ?? 18082);
const prefix = 'def add(a, b):\n    ';
const suffix = '\n\nprint(add(2, 3))\n';

test.describe('a model with FIM tokens', () => {
  test.use({ baseURL: `http://127.0.0.1:${fimPort}` });

  test('the middle streams in at the cursor and a share keeps both sides', async ({ page, browser }, testInfo) => {
    test.setTimeout(2 * RUN_TIMEOUT);
    const pg = new Playground(page);
    await pg.open();
    await pg.modeInfill.check();
    await pg.setPrompt(prefix + suffix);
    // The caret to the end of line 2, by keyboard as a user would.
    await pg.prompt.press('Control+Home');
    await pg.prompt.press('ArrowDown');
    await pg.prompt.press('End');
    await expect(pg.infillHint).toHaveText('The middle is written at the cursor: line 2, column 5.');
    await pg.setSettings({ maxTokens: 8, temperature: 0, ignoreEos: true });
    const body = await pg.sendAndWait(pg.generate);
    expect(body).toMatchObject({ mode: 'infill', prompt: prefix, suffix });
    const middle = pg.output.getByTestId('fill');
    await expect(middle).not.toBeEmpty();
    const filled = (await middle.textContent()) ?? '';
    await expect(pg.output).toHaveText(prefix + filled + suffix);
    await pg.snap(testInfo, 'infill-done');

    await pg.share.click();
    await expect(pg.shareUrl).toHaveValue(/\/s\/[A-Za-z0-9_-]+$/);
    const context = await browser.newContext();
    const visitor = new Playground(await context.newPage());
    await visitor.open(await pg.shareUrl.inputValue());
    await expect(visitor.modeInfill).toBeChecked();
    await expect(visitor.prompt).toHaveValue(prefix + suffix);
    await expect(visitor.infillHint).toHaveText('The middle is written at the cursor: line 2, column 5.');
    await expect(visitor.sharedOutput.getByTestId('fill')).toHaveText(filled);
    await visitor.snap(testInfo, 'infill-shared');
    expect(pg.consoleErrors).toEqual([]);
    expect(visitor.consoleErrors).toEqual([]);
    await context.close();
  });
});

test('a model without FIM tokens offers no infill mode and says why', async ({ page }) => {
  const pg = new Playground(page);
  await pg.open();
  await expect(pg.infillUnavailable).toHaveText('Fill in the middle: this model has no FIM tokens.');
  await expect(pg.modeInfill).toHaveCount(0);
});
