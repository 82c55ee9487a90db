// Page object of the playground: tests read and drive the page only through
// these locators and helpers (data-testid hooks from the Leptos components).
import { Page, Locator, Response, TestInfo, expect } from '@playwright/test';

/** What a `done` SSE event carries (backend/api StreamEvent::Done). */
export interface DoneEvent {
  finish_reason: string;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  timings: { predicted_n: number; predicted_per_second: number; ttft_ms: number; predicted_ms: number; draft_n_accepted: number };
}

export interface Settings {
  maxTokens?: number | string;
  temperature?: number | string;
  topP?: number | string;
  seed?: number | string;
  ignoreEos?: boolean;
  /** A JSON schema for the answer (text; '' clears it). */
  jsonSchema?: string;
}

/** A real model on the CPU reference path in a debug build: allow time. */
export const RUN_TIMEOUT = 90_000;

export class Playground {
  readonly consoleErrors: string[] = [];
  readonly title: Locator;
  readonly backend: Locator;
  readonly prompt: Locator;
  readonly mode: Locator;
  readonly examples: Locator;
  readonly generate: Locator;
  readonly stop: Locator;
  readonly share: Locator;
  readonly shareUrl: Locator;
  readonly status: Locator;
  readonly runError: Locator;
  readonly retry: Locator;
  readonly output: Locator;
  readonly copy: Locator;
  readonly tokPerS: Locator;
  readonly tokensPerStep: Locator;
  readonly jsonSchema: Locator;
  readonly jsonSchemaError: Locator;
  readonly schemaVerdict: Locator;
  readonly ttft: Locator;
  readonly tokens: Locator;
  readonly elapsed: Locator;
  readonly chart: Locator;
  readonly maxTokens: Locator;
  readonly temperature: Locator;
  readonly topP: Locator;
  readonly seed: Locator;
  readonly ignoreEos: Locator;
  readonly settingsError: Locator;
  readonly sharedRun: Locator;
  readonly sharedOutput: Locator;
  readonly sharedTokPerS: Locator;
  readonly compare: Locator;
  readonly shareNotice: Locator;
  readonly shareMissing: Locator;
  readonly recentRuns: Locator;
  readonly system: Locator;
  readonly modeInfill: Locator;
  readonly infillHint: Locator;
  readonly infillUnavailable: Locator;
  readonly conversation: Locator;
  readonly turns: Locator;
  readonly regenerate: Locator;
  readonly editLast: Locator;
  readonly newChat: Locator;

  constructor(readonly page: Page) {
    const id = (t: string) => page.getByTestId(t);
    this.title = id('title');
    this.backend = id('backend');
    this.prompt = id('prompt');
    this.mode = id('mode');
    this.examples = id('examples');
    this.generate = id('generate');
    this.stop = id('stop');
    this.share = id('share');
    this.shareUrl = id('share-url');
    this.status = id('status');
    this.runError = id('run-error');
    this.retry = id('retry');
    this.output = id('output');
    this.copy = id('copy');
    this.tokPerS = id('tok-per-s');
    this.tokensPerStep = id('tokens-per-step');
    this.jsonSchema = id('json-schema');
    this.jsonSchemaError = id('json-schema-error');
    this.schemaVerdict = id('schema-verdict');
    this.ttft = id('ttft');
    this.tokens = id('tokens');
    this.elapsed = id('elapsed');
    this.chart = id('chart');
    this.maxTokens = id('max-tokens');
    this.temperature = id('temperature');
    this.topP = id('top-p');
    this.seed = id('seed');
    this.ignoreEos = id('ignore-eos');
    this.settingsError = id('settings-error');
    this.sharedRun = id('shared-run');
    this.sharedOutput = id('shared-output');
    this.sharedTokPerS = id('shared-tok-per-s');
    this.compare = id('compare');
    this.shareNotice = id('share-notice');
    this.shareMissing = id('share-missing');
    this.recentRuns = id('recent-run');
    this.system = id('system');
    this.modeInfill = id('mode-infill');
    this.infillHint = id('infill-hint');
    this.infillUnavailable = id('infill-unavailable');
    this.conversation = id('conversation');
    this.turns = id('turn');
    this.regenerate = id('regenerate');
    this.editLast = id('edit-last');
    this.newChat = id('new-chat');
    page.on('console', (msg) => { if (msg.type() === 'error') this.consoleErrors.push(msg.text()); });
    page.on('pageerror', (err) => this.consoleErrors.push(String(err)));
  }

  /** Opens the page and waits until WASM rendered and /api/info answered. */
  async open(path = '/') {
    await this.page.goto(path);
    await expect(this.backend).toContainText('·');
  }

  async setPrompt(text: string) {
    await this.prompt.fill(text);
  }

  async setSettings(s: Settings) {
    if (s.maxTokens !== undefined) await this.maxTokens.fill(String(s.maxTokens));
    if (s.temperature !== undefined) await this.temperature.fill(String(s.temperature));
    if (s.topP !== undefined) await this.topP.fill(String(s.topP));
    if (s.seed !== undefined) await this.seed.fill(String(s.seed));
    if (s.ignoreEos !== undefined) await this.ignoreEos.setChecked(s.ignoreEos);
    if (s.jsonSchema !== undefined) await this.jsonSchema.fill(s.jsonSchema);
  }

  /** The phase shown by the status line: idle, connecting, queued, streaming, done, stopped, error. */
  async expectState(state: string, timeout = RUN_TIMEOUT) {
    await expect(this.status).toHaveAttribute('data-state', state, { timeout });
  }

  /** Starts recording every state the status line passes through (see `states`). */
  async recordStates() {
    await this.page.evaluate(() => {
      const status = document.querySelector('[data-testid="status"]')!;
      const w = window as unknown as { states: string[] };
      w.states = [status.getAttribute('data-state')!];
      new MutationObserver(() => {
        const s = status.getAttribute('data-state')!;
        if (w.states[w.states.length - 1] !== s) w.states.push(s);
      }).observe(status, { attributes: true, attributeFilter: ['data-state'] });
    });
  }

  /** The states seen since `recordStates`, in order. */
  async states(): Promise<string[]> {
    return this.page.evaluate(() => (window as unknown as { states: string[] }).states);
  }

  /** The next /api/generate response (its body is complete once the run ended). */
  nextGenerate(): Promise<Response> {
    return this.page.waitForResponse((r) => r.url().endsWith('/api/generate') && r.request().method() === 'POST', { timeout: RUN_TIMEOUT });
  }

  /** Clicks `button`, waits for the run to end, and returns the request body it sent. */
  async sendAndWait(button: Locator): Promise<Record<string, unknown>> {
    const response = this.nextGenerate();
    await button.click();
    await this.expectState('done');
    return JSON.parse((await response).request().postData() ?? '{}');
  }

  /** Runs to completion and returns the `done` event the server sent. */
  async runToDone(): Promise<DoneEvent> {
    const response = this.nextGenerate();
    await this.generate.click();
    await this.expectState('done');
    return doneEvent(await (await response).text());
  }

  /** The counter's number (e.g. "12.3", "85 ms", "1.20 s" → 12.3, 85, 1.2). */
  async number(counter: Locator): Promise<number> {
    return parseFloat((await counter.textContent()) ?? '');
  }

  /** Saves a screenshot under the test's output folder and attaches it to the report. */
  async snap(testInfo: TestInfo, name: string, fullPage = true) {
    const path = testInfo.outputPath(`${name}.png`);
    await this.page.screenshot({ path, fullPage });
    await testInfo.attach(name, { path, contentType: 'image/png' });
  }
}

/** Parses an SSE body and returns the `done` event's payload. */
export function doneEvent(body: string): DoneEvent {
  for (const frame of body.split(/\r?\n\r?\n/)) {
    const data = frame.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
    if (!data) continue;
    const event = JSON.parse(data);
    if (event.type === 'done') return event as DoneEvent;
  }
  throw new Error(`no done event in the stream:\n${body.slice(0, 2000)}`);
}
