// Generate streams the output token by token while the counters update, and the
// final tok/s is the `done` event's decode tok/s to the digits shown.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT, doneEvent } from '../pages/playground';

test('output streams in and the counters end on the done event figures', async ({ page }, testInfo) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.setSettings({ maxTokens: 24, ignoreEos: true, temperature: 0 });
  // Record every distinct output length the page shows while it streams.
  await page.evaluate(() => {
    const out = document.querySelector('[data-testid="output"]')!;
    const w = window as unknown as { lengths: number[] };
    w.lengths = [];
    new MutationObserver(() => {
      const n = out.textContent?.length ?? 0;
      if (w.lengths[w.lengths.length - 1] !== n) w.lengths.push(n);
    }).observe(out, { childList: true, subtree: true, characterData: true });
  });

  await pg.recordStates();
  const response = pg.nextGenerate();
  await pg.generate.click();
  await expect.poll(() => pg.number(pg.tokens), { timeout: RUN_TIMEOUT }).toBeGreaterThanOrEqual(3);
  await expect.poll(() => pg.number(pg.tokPerS), { timeout: RUN_TIMEOUT }).toBeGreaterThan(0);
  expect(await pg.number(pg.ttft)).toBeGreaterThan(0);
  expect(await pg.number(pg.elapsed)).toBeGreaterThan(0);
  await pg.snap(testInfo, 'streaming');

  await pg.expectState('done');
  const done = doneEvent(await (await response).text());
  await pg.snap(testInfo, 'done');

  expect(await pg.states()).toEqual(expect.arrayContaining(['idle', 'connecting', 'streaming', 'done']));
  const lengths = await page.evaluate(() => (window as unknown as { lengths: number[] }).lengths);
  expect(lengths.length, `output lengths seen: ${lengths}`).toBeGreaterThanOrEqual(3);
  expect([...lengths].sort((a, b) => a - b)).toEqual(lengths);

  expect(done.timings.predicted_n).toBe(24);
  const shown = await pg.number(pg.tokPerS);
  expect(Math.abs(shown - done.timings.predicted_per_second)).toBeLessThanOrEqual(0.05 + 1e-9);
  await expect(pg.tokPerS).toHaveText(/^\d+\.\d$/);
  await expect(pg.tokens).toHaveText(String(done.usage.completion_tokens));
  expect(Math.abs((await pg.number(pg.ttft)) - done.timings.ttft_ms)).toBeLessThanOrEqual(0.5 + 1e-9);
  await expect(pg.status).toContainText(`${done.usage.completion_tokens} tokens`);
  await expect(pg.chart.locator('polyline')).toHaveAttribute('points', /\d/);
  expect(pg.consoleErrors).toEqual([]);
});
