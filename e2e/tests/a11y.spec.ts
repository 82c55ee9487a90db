// axe finds no serious or critical accessibility violations, idle and after a run.
import { test, expect } from '@playwright/test';
import AxeBuilder from '@axe-core/playwright';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('no serious or critical axe violations', async ({ page }, testInfo) => {
  test.setTimeout(2 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  const serious = async () => {
    const result = await new AxeBuilder({ page }).analyze();
    return result.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  };
  expect(await serious()).toEqual([]);
  await pg.setSettings({ maxTokens: 8, ignoreEos: true });
  await pg.runToDone();
  await pg.setSettings({ maxTokens: 0 });
  expect(await serious()).toEqual([]);
  await pg.snap(testInfo, 'a11y-after-run');
});
