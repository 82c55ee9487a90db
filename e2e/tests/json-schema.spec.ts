// A JSON schema in the settings constrains the answer: the chat answer is JSON that
// the page checks against the schema and says so; a schema that is not JSON is a
// field error and nothing is sent; without a schema no verdict is shown.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

const SCHEMA = JSON.stringify({
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
  required: ['name', 'age'],
  additionalProperties: false,
});

test('a JSON schema shapes the answer and the page says it validates', async ({ page }, testInfo) => {
  test.setTimeout(3 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.mode.getByLabel('Chat').check();
  await pg.prompt.fill('Describe a person as JSON.');
  await pg.setSettings({ jsonSchema: '{"type": "object",', maxTokens: 60, temperature: 0 });
  await expect(pg.jsonSchemaError).toContainText('not valid JSON');
  await pg.generate.click();
  await expect(pg.status).toHaveAttribute('data-state', 'idle');

  await pg.setSettings({ jsonSchema: SCHEMA });
  await expect(pg.jsonSchemaError).toBeEmpty();
  const response = pg.nextGenerate();
  await pg.generate.click();
  await pg.expectState('done');
  const sent = (await response).request().postDataJSON();
  expect(sent.json_schema).toEqual(JSON.parse(SCHEMA));
  const answer = JSON.parse(await pg.output.innerText());
  expect(Object.keys(answer).sort()).toEqual(['age', 'name']);
  expect(Number.isInteger(answer.age)).toBe(true);
  await expect(pg.schemaVerdict).toHaveAttribute('data-valid', 'true');
  await expect(pg.schemaVerdict).toContainText('validates against the JSON schema');
  await pg.snap(testInfo, 'schema-done');

  // The next message of the chat, without a schema: no verdict.
  await pg.setSettings({ jsonSchema: '', maxTokens: 8 });
  await pg.prompt.fill('Thanks.');
  await pg.runToDone();
  await expect(pg.schemaVerdict).toHaveCount(0);
  expect(pg.consoleErrors).toEqual([]);
});
