// Generate streams the output token by token while the counters update, and the
// final tok/s and tokens per step are the `done` event's figures to the digits shown.
// The page renders once per received chunk, so how many partial outputs it shows
// depends on how the browser groups the stream; the checks below ask only for what
// any real stream gives: partial output on screen while the state is `streaming`.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT, doneEvent } from '../pages/playground';

test('output streams in and the counters end on the done event figures', async ({ page }, testInfo) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.setSettings({ maxTokens: 48, ignoreEos: true, temperature: 0 });
  // Record every distinct output length the page shows, with the state shown beside it.
  await page.evaluate(() => {
    const out = document.querySelector('[data-testid="output"]')!;
    const status = document.querySelector('[data-testid="status"]')!;
    const w = window as unknown as { lengths: number[]; partialWhileStreaming: boolean };
    w.lengths = [];
    w.partialWhileStreaming = false;
    new MutationObserver(() => {
      const n = out.textContent?.length ?? 0;
      if (w.lengths[w.lengths.length - 1] !== n) w.lengths.push(n);
      if (n > 0 && status.getAttribute('data-state') === 'streaming') w.partialWhileStreaming = true;
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

  const seen = await page.evaluate(() => {
    const w = window as unknown as { lengths: number[]; partialWhileStreaming: boolean };
    return { lengths: w.lengths, partialWhileStreaming: w.partialWhileStreaming };
  });
  const states = await pg.states();
  const story = `states ${states.join(' → ')}; output lengths ${seen.lengths.join(', ')}`;
  expect(states, story).toEqual(expect.arrayContaining(['idle', 'connecting', 'streaming', 'done']));
  expect(seen.partialWhileStreaming, story).toBe(true);
  // Partial output first, then the whole: at least two lengths, never shrinking.
  expect(seen.lengths.length, story).toBeGreaterThanOrEqual(2);
  expect([...seen.lengths].sort((a, b) => a - b), story).toEqual(seen.lengths);

  expect(done.timings.predicted_n).toBe(48);
  const shown = await pg.number(pg.tokPerS);
  expect(Math.abs(shown - done.timings.predicted_per_second)).toBeLessThanOrEqual(0.05 + 1e-9);
  await expect(pg.tokPerS).toHaveText(/^\d+\.\d$/);
  await expect(pg.tokens).toHaveText(String(done.usage.completion_tokens));
  // Tokens per pass over the weights: drafted tokens the model accepted share a pass.
  const steps = done.timings.predicted_n - done.timings.draft_n_accepted;
  await expect(pg.tokensPerStep).toHaveText((done.timings.predicted_n / steps).toFixed(2));
  expect(Math.abs((await pg.number(pg.ttft)) - done.timings.ttft_ms)).toBeLessThanOrEqual(0.5 + 1e-9);
  await expect(pg.status).toContainText(`${done.usage.completion_tokens} tokens`);
  await expect(pg.chart.locator('polyline')).toHaveAttribute('points', /\d/);
  expect(pg.consoleErrors).toEqual([]);
});
