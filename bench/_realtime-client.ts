/**
 * The client half of bench/realtime.ts: runs `sessions` /realtime sessions one after another
 * with the real SvcClient and records what a remote client sees. Used on the server's own event
 * loop (`runRealtimeClient`) or in a worker thread of its own (this module as the worker entry,
 * through plugins/face/render-worker-boot.mjs), so that the client's allocations and garbage
 * collections are not charged to the server.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { SvcClient } from '../transports/realtime/svc-client.ts';

export interface RealtimeClientJob {
  readonly wsUrl: string;
  readonly apiKey: string;
  readonly configId: string;
  readonly sessions: number;
  /** Sessions run first and not counted (the first compiles the paths, starts the render worker). */
  readonly warmup?: number;
  /** Then this long with nothing to do, before the measured sessions (see settleMs in realtime.ts). */
  readonly settleMs?: number;
}

export interface RealtimeFigures {
  connect: number[];
  firstFrame: number[];
  /** Arrival gaps between consecutive frames of a session (25 fps = 40 ms). */
  intervals: number[];
  cancel: number[];
}

function speech(ms: number): Int16Array {
  return Int16Array.from({ length: (ms * 16_000) / 1000 }, (_, i) => Math.round(9000 * Math.sin((2 * Math.PI * 180 * i) / 16_000)));
}

export async function runRealtimeClient(job: RealtimeClientJob): Promise<RealtimeFigures> {
  const warmup = job.warmup ?? 0;
  if (warmup > 0) await runRealtimeClient({ ...job, sessions: warmup, warmup: 0, settleMs: 0 });
  if (job.settleMs) await new Promise((r) => setTimeout(r, job.settleMs));
  const figures: RealtimeFigures = { connect: [], firstFrame: [], intervals: [], cancel: [] };
  // Synthesised once, before any session: made per session, its 48,000 sin() calls blocked the
  // event loop (the server's too, when they share it) for ~30 ms in the middle of every session.
  const utterance = speech(3000);
  for (let s = 0; s < job.sessions; s++) {
    const client = new SvcClient({ apiKey: job.apiKey, configId: job.configId, url: job.wsUrl });
    const t0 = performance.now();
    await client.connect();
    figures.connect.push(performance.now() - t0);
    let sentAt = 0;
    let cancelAt = 0;
    let lastArrival = 0;
    let firstSpeech = 0;
    const done = new Promise<void>((resolve) => {
      client.messages$.subscribe((m) => {
        if (m.type !== 'frame') return;
        const now = performance.now();
        if (lastArrival) figures.intervals.push(now - lastArrival);
        lastArrival = now;
        const f = m.frame;
        if (!firstSpeech && sentAt && (f.type === 'speech-start' || f.type === 'speech')) {
          firstSpeech = now;
          figures.firstFrame.push(now - sentAt);
        }
        if (cancelAt && f.type === 'idle') {
          figures.cancel.push(now - cancelAt);
          cancelAt = 0;
          resolve();
        }
      });
    });
    await new Promise((r) => setTimeout(r, 500));
    sentAt = performance.now();
    client.startTurn();
    client.sendAudio(utterance);
    await new Promise((r) => setTimeout(r, 1000));
    cancelAt = performance.now();
    client.cancel();
    await done;
    client.close();
  }
  return figures;
}

if (parentPort && (workerData as { job?: RealtimeClientJob } | undefined)?.job) {
  const port = parentPort;
  runRealtimeClient((workerData as { job: RealtimeClientJob }).job).then(
    (figures) => port.postMessage({ figures }),
    (err: unknown) => port.postMessage({ error: err instanceof Error ? err.stack ?? err.message : String(err) }),
  );
}
