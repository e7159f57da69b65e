/**
 * The worker thread behind an offline engine (espeak-ng, Moonshine): started on first use, it says
 * `{type:'ready'}` once its data is loaded (or `{type:'failed', message}` when it cannot load),
 * then answers requests by id. A worker that stops (crash, exit, a load that failed) fails every
 * request it held and is started again by the next one; `close()` ends it and fails what it held.
 * It keeps the process alive only while it holds a request (`hold` / `letGo`).
 */
import { Worker } from 'node:worker_threads';
import { LocalEngineError } from './local-engine-error.ts';

/** What every engine worker may say besides its own replies. */
type LifecycleReply = { type: 'ready' } | { type: 'failed'; message: string };

export interface EngineWorkerOptions<Reply> {
  /** The engine's name in errors ("espeak-ng", "moonshine"). */
  readonly name: string;
  readonly url: URL;
  readonly workerData?: () => unknown;
  /** Every reply but `ready` and `failed`. */
  readonly onReply: (reply: Reply) => void;
  /** The worker stopped or was closed: every request it held has failed with `error`. */
  readonly onStop: (error: LocalEngineError) => void;
  /** Whether any request is held (the worker is let go of when none is, e.g. once it is ready). */
  readonly busy: () => boolean;
}

export class EngineWorker<Reply extends { readonly type: string }> {
  private worker: Worker | undefined;
  private ready: Promise<void> | undefined;

  constructor(private readonly options: EngineWorkerOptions<Reply>) {}

  /** Starts the worker and waits for its data to load; every request calls it. */
  start(): Promise<void> {
    if (this.ready) return this.ready;
    const { name, url, workerData, onReply, onStop, busy } = this.options;
    const worker = new Worker(url, workerData ? { workerData: workerData() } : {});
    this.worker = worker;
    this.ready = new Promise<void>((resolve, reject) => {
      const crash = (error: Error) => {
        if (this.worker === worker) {
          this.worker = undefined;
          this.ready = undefined;
        }
        const wrapped = new LocalEngineError('engine_failure', `${name} worker stopped: ${error.message}`);
        reject(wrapped);
        onStop(wrapped);
      };
      worker.on('message', (reply: Reply | LifecycleReply) => {
        if (reply.type === 'ready') {
          if (!busy()) worker.unref();
          return resolve();
        }
        if (reply.type === 'failed') {
          crash(new Error(`its data did not load: ${(reply as LifecycleReply & { type: 'failed' }).message}`));
          void worker.terminate();
          return;
        }
        onReply(reply as Reply);
      });
      worker.on('error', crash);
      worker.on('exit', (code) => {
        if (this.worker === worker) crash(new Error(`exit code ${code}`));
      });
    });
    // A start failure is reported to the requests waiting for it, never left unhandled.
    this.ready.catch(() => undefined);
    return this.ready;
  }

  /** Starts the worker if it must, then sends it a request, holding the process until `letGo`. */
  async post(message: Record<string, unknown>, transfer: readonly ArrayBuffer[] = []): Promise<void> {
    await this.start();
    const worker = this.worker;
    if (!worker) throw new LocalEngineError('engine_failure', `${this.options.name} worker stopped`);
    worker.ref();
    worker.postMessage(message, [...transfer]);
  }

  /** A request ended: the process no longer waits for the worker when none is held. */
  letGo(): void {
    if (!this.options.busy()) this.worker?.unref();
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    this.ready = undefined;
    this.options.onStop(new LocalEngineError('engine_failure', `${this.options.name} engine closed`));
    if (worker) await worker.terminate();
  }
}
