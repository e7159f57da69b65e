/**
 * /realtime over loopback: what a remote client sees. Starts the real server (PGlite in a
 * temporary directory, the face plugin), opens sessions with the real SvcClient and measures:
 * - connect_ms: WebSocket open to session_ready;
 * - first_frame_ms: first speech audio sent to the first speech frame received;
 * - frame_jitter_*: how far the gap between consecutive received frames is from 40 ms (25 fps);
 *   the client runs on the server's event loop, then once more in a worker thread of its own
 *   (frame_jitter_worker_client_p99_ms);
 * - cancel_to_idle_ms: cancel sent to the first idle frame received.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { facePlugin } from '../plugins/face/index.ts';
import { createServer } from '../server/build-server.ts';
import { Worker } from 'node:worker_threads';
import { runRealtimeClient, type RealtimeClientJob, type RealtimeFigures } from './_realtime-client.ts';
import { percentile, printJson, printTable } from './table.ts';

const SESSIONS = 12;
/**
 * After the warm-up session, this long idle before measuring: a server process just started
 * (modules, PGlite, the face engine) runs a series of full collections over its first seconds
 * while its heap settles; measured, they stopped within ~4 s, and a live session with speech
 * then ran 20 s without one. The figures are the running server's, not its start-up's.
 */
const REALTIME_BENCH_SETTLE_MS = 5_000;

export type { RealtimeFigures } from './_realtime-client.ts';

/** Where the client runs: on the server's event loop, or in a worker thread (its own heap). */
export type RealtimeClientPlacement = 'same-loop' | 'worker';

async function clientInWorker(job: RealtimeClientJob): Promise<RealtimeFigures> {
  const worker = new Worker(new URL('../plugins/face/render-worker-boot.mjs', import.meta.url), {
    workerData: { entry: new URL('./_realtime-client.ts', import.meta.url).href, job },
    execArgv: [],
  });
  try {
    const reply = await new Promise<{ figures?: RealtimeFigures; error?: string }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`realtime bench client exited (${code})`)));
    });
    if (!reply.figures) throw new Error(`realtime bench client failed: ${reply.error}`);
    return reply.figures;
  } finally {
    await worker.terminate();
  }
}

/**
 * Runs `sessions` sessions one after another against a fresh server on loopback (720p), after
 * one warm-up session, the client on the server's event loop or in a worker thread of its own.
 */
export async function measureRealtime(sessions: number = SESSIONS, placement: RealtimeClientPlacement = 'worker'): Promise<RealtimeFigures> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-rt-'));
  const server = await createServer(
    { encryptionKey: 'bench', signingSecret: 'bench', port: 0, host: '127.0.0.1', dataDir, logLevel: 'silent', surfaces: { realtime: true },
      // One session at a time, measured: the gate's refusals (a loaded machine's late frames) have their own tests and bench (capacity).
      capacityLoadCheck: false },
    { registry: new Registry().use(facePlugin), logger: pino({ level: 'silent' }) },
  );
  try {
    const { url } = await server.listen();
    const { key } = await server.services.apiKeys.create('bench', 'bench');
    const created = await server.services.modelConfigs.create(
      { organizationId: (await server.services.apiKeys.authenticate(key))!.organizationId, apiKeyId: 'bench', createdBy: 'api_key:bench' },
      { title: '720p', model_variant_id: 'svc/human-portrait/v1', model_configurations: { width: 1280, height: 720 } },
    );
    const job: RealtimeClientJob = { wsUrl: `${url.replace(/^http/, 'ws')}/realtime`, apiKey: key, configId: created.model_config_id, sessions, warmup: 1, settleMs: REALTIME_BENCH_SETTLE_MS };
    return placement === 'worker' ? await clientInWorker(job) : await runRealtimeClient(job);
  } finally {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function run(): Promise<void> {
  // The client on the server's event loop, as a client in the same process sees the frames.
  const { connect, firstFrame, intervals, cancel } = await measureRealtime(SESSIONS, 'same-loop');
  // The same client in a worker thread: its collections no longer pause the server, but on a
  // 2-core machine it is one more busy thread beside the event loop, the render worker and the
  // encoder (see docs/face-models.md, "Arrival jitter").
  const inWorker = await measureRealtime(SESSIONS, 'worker');
  const jitter = intervals.map((i) => Math.abs(i - 40));
  const jitterWorker = inWorker.intervals.map((i) => Math.abs(i - 40));
  printTable([
    { figure: 'connect -> session_ready (ms)', p50: percentile(connect, 50), p99: percentile(connect, 99), goal: '' },
    { figure: 'first audio -> first speech frame (ms)', p50: percentile(firstFrame, 50), p99: percentile(firstFrame, 99), goal: '< 150' },
    { figure: 'frame arrival gap error (ms)', p50: percentile(jitter, 50), p99: percentile(jitter, 99), goal: '< 5 (p99)' },
    { figure: '  same, client in a worker thread (ms)', p50: percentile(jitterWorker, 50), p99: percentile(jitterWorker, 99), goal: '' },
    { figure: 'cancel -> idle frame (ms)', p50: percentile(cancel, 50), p99: percentile(cancel, 99), goal: '< 200' },
  ]);
  printJson('realtime', {
    sessions: SESSIONS,
    canvas: '1280x720',
    connect_p50_ms: +percentile(connect, 50).toFixed(1),
    first_frame_remote_p50_ms: +percentile(firstFrame, 50).toFixed(1),
    first_frame_remote_p99_ms: +percentile(firstFrame, 99).toFixed(1),
    frame_jitter_p50_ms: +percentile(jitter, 50).toFixed(2),
    frame_jitter_p99_ms: +percentile(jitter, 99).toFixed(2),
    frame_jitter_max_ms: +Math.max(...jitter).toFixed(2),
    frame_jitter_worker_client_p99_ms: +percentile(jitterWorker, 99).toFixed(2),
    cancel_to_idle_p50_ms: +percentile(cancel, 50).toFixed(1),
    cancel_to_idle_p99_ms: +percentile(cancel, 99).toFixed(1),
    loadavg_1m: +loadavg()[0]!.toFixed(2),
  });
}
