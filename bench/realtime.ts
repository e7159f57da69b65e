/**
 * /realtime over loopback: what a remote client sees. Starts the real server (PGlite in a
 * temporary directory, the face plugin), opens sessions with the real SvcClient and measures:
 * - connect_ms: WebSocket open to session_ready;
 * - first_frame_ms: first speech audio sent to the first speech frame received;
 * - frame_interval_p99_ms / jitter: spacing of received frames (25 fps = 40 ms);
 * - cancel_to_idle_ms: cancel sent to the first idle frame received.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { facePlugin } from '../plugins/face/index.ts';
import { createServer } from '../server/app.ts';
import { mountRealtime } from '../server/realtime/index.ts';
import { SvcClient } from '../transports/realtime/svc-client.ts';
import { percentile, printJson, printTable } from './table.ts';

const SESSIONS = 8;

function speech(ms: number): Int16Array {
  return Int16Array.from({ length: (ms * 16_000) / 1000 }, (_, i) => Math.round(9000 * Math.sin((2 * Math.PI * 180 * i) / 16_000)));
}

export interface RealtimeFigures {
  connect: number[];
  firstFrame: number[];
  intervals: number[];
  cancel: number[];
}

/** Runs `sessions` sessions one after another against a fresh server on loopback (720p). */
export async function measureRealtime(sessions: number = SESSIONS): Promise<RealtimeFigures> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-rt-'));
  const server = await createServer(
    { encryptionKey: 'bench', signingSecret: 'bench', port: 0, host: '127.0.0.1', dataDir, logLevel: 'silent' },
    { registry: new Registry().use(facePlugin), logger: pino({ level: 'silent' }) },
  );
  const endpoint = mountRealtime(server);
  const { url } = await server.listen();
  const { key } = await server.services.apiKeys.create('bench', 'bench');
  const created = await server.services.modelConfigs.create(
    { organizationId: (await server.services.apiKeys.authenticate(key))!.organizationId, apiKeyId: 'bench', createdBy: 'api_key:bench' },
    { title: '720p', model_variant_id: 'svc/human-portrait/v1', model_configurations: { width: 1280, height: 720 } },
  );
  const wsUrl = `${url.replace(/^http/, 'ws')}/realtime`;
  const connect: number[] = [];
  const firstFrame: number[] = [];
  const intervals: number[] = [];
  const cancel: number[] = [];
  for (let s = 0; s < sessions; s++) {
    const client = new SvcClient({ apiKey: key, configId: created.model_config_id, url: wsUrl });
    const t0 = performance.now();
    await client.connect();
    connect.push(performance.now() - t0);
    let sentAt = 0;
    let cancelAt = 0;
    let lastArrival = 0;
    let firstSpeech = 0;
    const done = new Promise<void>((resolve) => {
      client.messages$.subscribe((m) => {
        if (m.type !== 'frame') return;
        const now = performance.now();
        if (lastArrival) intervals.push(now - lastArrival);
        lastArrival = now;
        const f = m.frame;
        if (!firstSpeech && sentAt && (f.type === 'speech-start' || f.type === 'speech')) {
          firstSpeech = now;
          firstFrame.push(now - sentAt);
        }
        if (cancelAt && f.type === 'idle') {
          cancel.push(now - cancelAt);
          cancelAt = 0;
          resolve();
        }
      });
    });
    await new Promise((r) => setTimeout(r, 500));
    sentAt = performance.now();
    client.startTurn();
    client.sendAudio(speech(3000));
    await new Promise((r) => setTimeout(r, 1000));
    cancelAt = performance.now();
    client.cancel();
    await done;
    client.close();
  }
  await endpoint.close();
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
  return { connect, firstFrame, intervals, cancel };
}

export async function run(): Promise<void> {
  const { connect, firstFrame, intervals, cancel } = await measureRealtime(SESSIONS);
  const jitter = intervals.map((i) => Math.abs(i - 40));
  printTable([
    { figure: 'connect -> session_ready (ms)', p50: percentile(connect, 50), p99: percentile(connect, 99), goal: '' },
    { figure: 'first audio -> first speech frame (ms)', p50: percentile(firstFrame, 50), p99: percentile(firstFrame, 99), goal: '< 150' },
    { figure: 'frame arrival jitter (ms)', p50: percentile(jitter, 50), p99: percentile(jitter, 99), goal: '(clients play on their own clock)' },
    { figure: 'cancel -> idle frame (ms)', p50: percentile(cancel, 50), p99: percentile(cancel, 99), goal: '< 200' },
  ]);
  printJson('realtime', {
    sessions: SESSIONS,
    canvas: '1280x720',
    connect_p50_ms: +percentile(connect, 50).toFixed(1),
    first_frame_remote_p50_ms: +percentile(firstFrame, 50).toFixed(1),
    first_frame_remote_p99_ms: +percentile(firstFrame, 99).toFixed(1),
    frame_jitter_p99_ms: +percentile(jitter, 99).toFixed(2),
    cancel_to_idle_p50_ms: +percentile(cancel, 50).toFixed(1),
    cancel_to_idle_p99_ms: +percentile(cancel, 99).toFixed(1),
  });
}
