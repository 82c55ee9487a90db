// At 375 px wide the whole playground fits without horizontal scrolling.
import { test, expect } from '@playwright/test';
import { Playground } from '../pages/playground';

test.use({ viewport: { width: 375, height: 812 } });

test('the playground is usable at 375 px', async ({ page }, testInfo) => {
  const pg = new Playground(page);
  await pg.open();
  const scrollWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(scrollWidth).toBeLessThanOrEqual(375);
  for (const el of [pg.prompt, pg.generate, pg.stop, pg.share, pg.tokPerS, pg.ttft, pg.tokens, pg.elapsed, pg.output, pg.maxTokens]) {
    const box = await el.boundingBox();
    expect(box, 'element is rendered').not.toBeNull();
    expect(box!.x).toBeGreaterThanOrEqual(0);
    expect(box!.x + box!.width).toBeLessThanOrEqual(375);
  }
  // The output comes before the settings in the single column.
  const outputTop = (await pg.output.boundingBox())!.y;
  const settingsTop = (await pg.maxTokens.boundingBox())!.y;
  expect(outputTop).toBeLessThan(settingsTop);
  await pg.snap(testInfo, 'layout-375', true);
});
