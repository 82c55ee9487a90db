// A share link made after a run restores the prompt, mode and settings in a fresh
// browser context and shows that run as "shared run" to race against.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('share link round trip in a fresh browser context', async ({ page, browser }, testInfo) => {
  test.setTimeout(3 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  const prompt = 'fn add(a: i32, b: i32) -> i32 {\n';
  await pg.setPrompt(prompt);
  await pg.setSettings({ maxTokens: 6, temperature: 0.5, seed: 1234, ignoreEos: true });
  await pg.runToDone();
  const output = (await pg.output.textContent()) ?? '';
  const tokPerS = (await pg.tokPerS.textContent()) ?? '';
  expect(output.length).toBeGreaterThan(0);

  await pg.share.click();
  await expect(pg.shareUrl).toHaveValue(/^http:\/\/[^/]+\/s\/[A-Za-z0-9_-]+$/);
  const url = await pg.shareUrl.inputValue();
  await pg.snap(testInfo, 'share-created');

  const context = await browser.newContext();
  const visitor = new Playground(await context.newPage());
  await visitor.open(url);
  await expect(visitor.shareNotice).toBeVisible();
  await expect(visitor.prompt).toHaveValue(prompt);
  await expect(visitor.maxTokens).toHaveValue('6');
  await expect(visitor.temperature).toHaveValue('0.5');
  await expect(visitor.seed).toHaveValue('1234');
  await expect(visitor.ignoreEos).toBeChecked();
  await expect(visitor.mode.getByLabel('Code completion')).toBeChecked();
  await expect(visitor.sharedRun).toBeVisible();
  await expect(visitor.sharedOutput).toHaveText(output);
  await expect(visitor.sharedTokPerS).toHaveText(tokPerS);
  await expect(visitor.generate).toHaveText('Run');
  await visitor.snap(testInfo, 'share-restored');

  // Race it: the visitor's run is compared with the shared one.
  await visitor.generate.click();
  await visitor.expectState('done');
  await expect(visitor.compare).toContainText(/Your run: \d+\.\d tok\/s, .* the shared run/);
  await visitor.snap(testInfo, 'share-raced');
  expect(visitor.consoleErrors).toEqual([]);
  await context.close();
});
