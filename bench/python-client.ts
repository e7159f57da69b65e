/**
 * The Python client library (clients/python) against a real server process: `server/main.ts` as
 * `npm start` runs it (test/sessions/server-process.ts, PGlite in a temporary directory, a
 * 640x360 human-portrait model config), driven by clients/python/bench/stv_client.py in the
 * project's venv (clients/python/.venv, created and installed by `scripts/test-python.sh --setup`
 * when missing). Figures, per utterance of 2 s of 24 kHz TTS audio:
 * - first audio -> first speech frame received (raw, as the server sends it) and played (out of
 *   SvcSTVClient.output_stream(), after its 80 ms jitter buffer);
 * - SvcSTVClient playback clock jitter: |interval - 40 ms| between consecutive audio frames the
 *   application receives, excluding intervals across an underrun (goal p99 < 5 ms, as the
 *   TypeScript client).
 * `PYTHON_BENCH_UTTERANCES` sets the number of utterances (default 10).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServerProcess, type ServerProcess } from '../test/sessions/server-process.ts';
import { percentile, printJson, printTable } from './table.ts';

const ROOT = join(import.meta.dirname, '..');
const PYTHON = join(ROOT, 'clients', 'python', '.venv', 'bin', 'python');
const SCRIPT = join(ROOT, 'clients', 'python', 'bench', 'stv_client.py');
const UTTERANCES = Number(process.env.PYTHON_BENCH_UTTERANCES ?? 10);
const SCRIPT_TIMEOUT_MS = (UTTERANCES * 4 + 120) * 1000;

interface PythonFigures {
  connect_ms: number;
  first_frame_received_ms: number[];
  first_frame_played_ms: number[];
  jitter_ms: number[];
  queued_frames_at_say: number[];
  ticks: number;
  underruns: number;
  dropped: number;
  python: string;
}

function ensureVenv(): void {
  // The same venv, install and lock as `npm run test:python`; quick when already set up.
  const setup = spawnSync('bash', [join(ROOT, 'scripts', 'test-python.sh'), '--setup'], { stdio: 'inherit' });
  if (setup.status !== 0 || !existsSync(PYTHON)) throw new Error('could not set up clients/python/.venv (scripts/test-python.sh --setup)');
}

/** Runs the Python script in a process group of its own, killed whole on timeout. */
function runPython(env: Record<string, string>): Promise<PythonFigures> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [SCRIPT, String(UTTERANCES)], { cwd: ROOT, env: { ...process.env, ...env }, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    }, SCRIPT_TIMEOUT_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      const line = out.trim().split('\n').at(-1) ?? '';
      if (code !== 0) return reject(new Error(`stv_client.py failed (${code ?? signal}):\n${err.slice(-3000)}`));
      try {
        resolve(JSON.parse(line) as PythonFigures);
      } catch {
        reject(new Error(`stv_client.py printed no JSON line:\n${out.slice(-2000)}\n${err.slice(-2000)}`));
      }
    });
  });
}

export async function run(): Promise<void> {
  ensureVenv();
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-python-'));
  let server: ServerProcess | undefined;
  try {
    const loadBefore = loadavg()[0]!;
    server = await startServerProcess({ SVC_DATA_DIR: dataDir, DATABASE_URL: '' });
    const key = server.firstKey;
    if (!key) throw new Error(`no first-start API key in the server output:\n${server.output}`);
    const res = await fetch(`${server.url}/v1/model-configs`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ title: 'python bench', model_variant_id: 'svc/human-portrait/v1', model_configurations: { width: 640, height: 360 } }),
    });
    const created = (await res.json()) as { model_config_id?: string };
    if (!res.ok || !created.model_config_id) throw new Error(`model config: ${res.status} ${JSON.stringify(created)}`);
    const figures = await runPython({
      SVC_API_KEY: key,
      SVC_CONFIG_ID: created.model_config_id,
      SVC_WS_URL: `${server.url.replace(/^http/, 'ws')}/realtime`,
    });
    const loadAfter = loadavg()[0]!;
    const received = figures.first_frame_received_ms;
    const played = figures.first_frame_played_ms;
    const jitter = figures.jitter_ms;
    printTable([
      { figure: 'first audio -> first speech frame received (ms)', p50: percentile(received, 50), p99: percentile(received, 99), goal: '' },
      { figure: 'first audio -> first speech frame played (ms)', p50: percentile(played, 50), p99: percentile(played, 99), goal: '(+ the frames queued ahead)' },
      { figure: 'frames queued ahead when speech starts', p50: percentile(figures.queued_frames_at_say, 50), p99: percentile(figures.queued_frames_at_say, 99), goal: '(jitter buffer: 2)' },
      { figure: 'playback clock jitter |interval - 40| (ms)', p50: percentile(jitter, 50), p99: percentile(jitter, 99), goal: '< 5' },
    ]);
    console.log(`${UTTERANCES} utterances, ${figures.ticks} ticks, ${figures.underruns} underruns, ${figures.dropped} dropped; Python ${figures.python}; load ${loadBefore.toFixed(2)} -> ${loadAfter.toFixed(2)}`);
    printJson('python_client', {
      utterances: UTTERANCES,
      size: '640x360',
      connect_ms: +figures.connect_ms.toFixed(1),
      first_frame_received_p50_ms: +percentile(received, 50).toFixed(1),
      first_frame_received_p99_ms: +percentile(received, 99).toFixed(1),
      first_frame_played_p50_ms: +percentile(played, 50).toFixed(1),
      first_frame_played_p99_ms: +percentile(played, 99).toFixed(1),
      queued_frames_at_say_p50: percentile(figures.queued_frames_at_say, 50),
      queued_frames_at_say_max: Math.max(...figures.queued_frames_at_say),
      playback_jitter_p50_ms: +percentile(jitter, 50).toFixed(2),
      playback_jitter_p99_ms: +percentile(jitter, 99).toFixed(2),
      playback_jitter_goal_ms: 5,
      ticks: figures.ticks,
      underruns: figures.underruns,
      dropped: figures.dropped,
      python: figures.python,
      load_1m: [+loadBefore.toFixed(2), +loadAfter.toFixed(2)],
    });
  } finally {
    server?.kill('SIGTERM');
    const exited = await Promise.race([server?.exited, new Promise((r) => setTimeout(() => r('timeout'), 10_000))]);
    if (exited === 'timeout') server?.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}
