// A chat conversation: each message is sent after the system prompt and the earlier
// turns, which the page lists with their own figures; Regenerate answers the last
// message again, Edit puts it back in the editor, a share link carries the whole
// conversation, New chat forgets it.
import { test, expect } from '@playwright/test';
import { Playground, RUN_TIMEOUT } from '../pages/playground';

test('a conversation carries its turns, regenerates, edits and shares', async ({ page, browser }, testInfo) => {
  test.setTimeout(6 * RUN_TIMEOUT);
  const pg = new Playground(page);
  await pg.open();
  await pg.mode.getByLabel('Chat').check();
  await pg.system.fill('You answer in a few words.');
  await pg.setSettings({ maxTokens: 6, temperature: 0, ignoreEos: true });
  await pg.setPrompt('Name a fruit.');
  await expect(pg.generate).toHaveText('Send');
  const first = await pg.sendAndWait(pg.generate);
  expect(first).toMatchObject({ mode: 'chat', prompt: 'Name a fruit.', system: 'You answer in a few words.' });
  expect(first.history).toBeUndefined();
  await expect(pg.prompt).toHaveValue('', { timeout: 5_000 });
  await expect(pg.conversation).toHaveCount(0);

  await pg.setPrompt('And a vegetable?');
  const second = await pg.sendAndWait(pg.generate);
  const history = second.history as { user: string; assistant: string }[];
  expect(history.map((t) => t.user)).toEqual(['Name a fruit.']);
  expect(history[0].assistant.length).toBeGreaterThan(0);
  await expect(pg.turns).toHaveCount(1);
  await expect(pg.turns.first().getByTestId('turn-user')).toHaveText('Name a fruit.');
  await expect(pg.turns.first().getByTestId('turn-figures')).toContainText('tok/s');
  await pg.snap(testInfo, 'two-turns');

  // Regenerate: the same message after the same single earlier turn.
  const again = await pg.sendAndWait(pg.regenerate);
  expect(again.prompt).toBe('And a vegetable?');
  expect((again.history as unknown[]).length).toBe(1);
  await expect(pg.turns).toHaveCount(1);

  // Share the conversation; a visitor sees its turns and the last answer as the shared run.
  await pg.share.click();
  await expect(pg.shareUrl).toHaveValue(/\/s\/[A-Za-z0-9_-]+$/);
  const context = await browser.newContext();
  const visitor = new Playground(await context.newPage());
  await visitor.open(await pg.shareUrl.inputValue());
  await expect(visitor.mode.getByLabel('Chat')).toBeChecked();
  await expect(visitor.system).toHaveValue('You answer in a few words.');
  await expect(visitor.turns).toHaveCount(1);
  await expect(visitor.turns.first().getByTestId('turn-user')).toHaveText('Name a fruit.');
  await expect(visitor.prompt).toHaveValue('And a vegetable?');
  await expect(visitor.sharedRun).toBeVisible();
  await visitor.snap(testInfo, 'conversation-shared');
  await context.close();

  // Edit the last message: it comes back in the editor and replaces the last turn.
  await pg.editLast.click();
  await expect(pg.prompt).toHaveValue('And a vegetable?');
  await expect(pg.output).toBeEmpty();
  await pg.setPrompt('And a colour?');
  const edited = await pg.sendAndWait(pg.generate);
  expect(edited.prompt).toBe('And a colour?');
  expect((edited.history as unknown[]).length).toBe(1);

  await pg.newChat.click();
  await expect(pg.conversation).toHaveCount(0);
  await expect(pg.output).toBeEmpty();
  expect(pg.consoleErrors).toEqual([]);
});
