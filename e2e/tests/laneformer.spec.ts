// A Laneformer checkpoint (the engine's random-weight 8-lane fixture: a `lane` head,
// per-lane norms, windowed layers) served by a second server: the playground streams
// its completion with the live counters, and they end on the done event's figures.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT, doneEvent } from '../pages/playground';

// The port playwright.config.ts starts the Laneformer server on.
const lanePort = Number(process.env.PEREGRINE_E2E_LANE_PORT ?? 18081);
test.use({ baseURL: `http://127.0.0.1:${lanePort}` });

test('a Laneformer streams in the playground with its counters', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await pg.open();
  await expect(pg.backend).toContainText('lane-head-lane-norms-window');
  await pg.setPrompt('the cat sat on');
  await pg.setSettings({ maxTokens: 24, ignoreEos: true, temperature: 0 });
  await pg.recordStates();
  const response = pg.nextGenerate();
  await pg.generate.click();
  await pg.expectState('done');
  const done = doneEvent(await (await response).text());
  await pg.snap(testInfo, 'done');
  expect(await pg.states()).toEqual(expect.arrayContaining(['connecting', 'done']));
  expect(done.usage.completion_tokens).toBe(24);
  await expect(pg.tokens).toHaveText('24');
  expect(await pg.number(pg.tokPerS)).toBeGreaterThan(0);
  expect(Math.abs((await pg.number(pg.ttft)) - done.timings.ttft_ms)).toBeLessThanOrEqual(0.5 + 1e-9);
  await expect(pg.output).not.toBeEmpty();
  expect(pg.consoleErrors).toEqual([]);
});
