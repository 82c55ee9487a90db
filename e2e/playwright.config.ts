// Playwright configuration: system Chromium (no browser download), the real
// `peregrine` binary started on a free port with the built dist/.
import { defineConfig } from '@playwright/test';
import * as os from 'os';
import * as path from 'path';

const port = Number(process.env.PEREGRINE_E2E_PORT ?? 18080);
// A second server on a Laneformer checkpoint (the engine's 8-lane test fixture), for
// tests/laneformer.spec.ts.
const lanePort = Number(process.env.PEREGRINE_E2E_LANE_PORT ?? 18081);
const laneModel = path.join(__dirname, '../backend/engine/tests/fixtures/laneformer/lane-head-lane-norms-window');
// A third on that fixture with FIM tokens (make-fim-model.mjs), for tests/infill.spec.ts.
const fimPort = Number(process.env.PEREGRINE_E2E_FIM_PORT ?? 18082);
const fimModel = path.join(os.tmpdir(), 'peregrine-e2e-fim-model');
// A fourth on the Laneformer fixture that wants an API key, for tests/api-key.spec.ts.
const keyPort = Number(process.env.PEREGRINE_E2E_KEY_PORT ?? 18083);
const bin = process.env.PEREGRINE_BIN ?? path.join(os.homedir(), '.cache/peregrine/target/debug/peregrine');
const model = process.env.PEREGRINE_DEFAULT_MODEL ?? path.join(os.homedir(), '.cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf');
// Chromium keeps its profile and caches out of $HOME.
const browserHome = path.join(os.tmpdir(), 'peregrine-e2e-chromium');
// Share links made by the tests go to a temporary store, not the user's.
const dataDir = path.join(os.tmpdir(), 'peregrine-e2e-data');

export default defineConfig({
  testDir: './tests',
  timeout: 60_000,
  expect: { timeout: 30_000 },
  retries: 0,
  workers: 1,
  reporter: 'list',
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    screenshot: 'on',
    trace: 'retain-on-failure',
    launchOptions: {
      executablePath: '/usr/bin/chromium',
      env: { ...process.env, HOME: browserHome, XDG_CONFIG_HOME: browserHome, XDG_CACHE_HOME: browserHome },
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    },
  },
  webServer: [
    {
      // A batch of two: requests run side by side, and two long ones fill it (queue.spec).
      command: `${bin} serve --port ${port} --dist ../dist --model ${model} --data-dir ${dataDir} --max-batch 2`,
      url: `http://127.0.0.1:${port}/health`,
      reuseExistingServer: false,
      timeout: 120_000,
      stdout: 'pipe',
      stderr: 'pipe',
    },
    {
      command: `${bin} serve --port ${lanePort} --dist ../dist --model ${laneModel} --device cpu --data-dir ${dataDir}-lanes`,
      url: `http://127.0.0.1:${lanePort}/health`,
      reuseExistingServer: false,
      timeout: 120_000,
      stdout: 'pipe',
      stderr: 'pipe',
    },
    {
      command: `node make-fim-model.mjs ${laneModel} ${fimModel} && ${bin} serve --port ${fimPort} --dist ../dist --model ${fimModel} --device cpu --data-dir ${dataDir}-fim`,
      url: `http://127.0.0.1:${fimPort}/health`,
      reuseExistingServer: false,
      timeout: 120_000,
      stdout: 'pipe',
      stderr: 'pipe',
    },
    {
      command: `${bin} serve --port ${keyPort} --dist ../dist --model ${laneModel} --device cpu --data-dir ${dataDir}-key --api-key e2e-key-5c1f`,
      url: `http://127.0.0.1:${keyPort}/health`,
      reuseExistingServer: false,
      timeout: 120_000,
      stdout: 'pipe',
      stderr: 'pipe',
    },
  ],
});
