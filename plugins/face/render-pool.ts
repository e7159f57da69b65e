/**
 * The process-wide face render worker pool. Rasterising a face (mesh warp + mouth interior) is
 * the one per-frame cost of a face session that is not tiny (1.4 ms at 640x360, 4.7 ms at
 * 1280x720 on a 2 vCPU Xeon), and at 25 fps per session it ran on the event loop that also
 * answers the REST API. Here it runs on worker threads:
 *
 * - `threads` workers at most (default `max(1, cores - 1)`: one core stays with the event loop;
 *   `SVC_FACE_RENDER_THREADS` overrides it, `0` renders inline), started lazily; a session goes to
 *   the worker with the fewest sessions, a new worker is started while one is missing.
 * - A worker keeps each session's renderer (its rig: framed reference canvas, mesh, weights),
 *   keyed by a session key; per frame only the pose (15 numbers) goes over, and the picture's
 *   buffer is transferred there and back (no copy; the caller reuses its buffers).
 * - A worker is referenced (keeps the process alive) only while a request is in flight, so an
 *   idle pool never holds a process open; all workers are terminated `idleShutdownMs` after the
 *   last session closed (`close()` terminates them at once).
 * - Errors: a failing open or render rejects only that request (that session fails); a worker
 *   that dies (crash, `killWorker`) fails the sessions it held and is replaced by the next open.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { resolveOptions } from '../../core/options.ts';
import type { FaceLandmarks } from '../../processors/avatar/face-model.ts';
import type { FaceOptions } from './configuration.ts';
import type { FacePose } from './face-pose.ts';
import type { FaceGeometry, FaceRaster, RasterFormat, RasterResult } from './face-raster.ts';
import type { RgbImage } from './landmark-detector.ts';
import type { RenderWorkerReply, RenderWorkerRequest } from './render-worker.ts';

export const RENDER_POOL_DEFAULTS = {
  /** Environment variable overriding the worker count (`0`: render inline on the caller's thread). */
  threadsEnv: 'SVC_FACE_RENDER_THREADS',
  /** Workers are terminated this long after the last session closed (a new session soon after reuses them). */
  idleShutdownMs: 10_000,
  /** Upper bound of the worker count (each worker is a V8 isolate of ~10 MB plus its rigs). */
  maxThreads: 64,
} as const;

/** `max(1, cores - 1)`: every core but one renders, the remaining one keeps the event loop. */
export function defaultRenderThreads(cores: number = availableParallelism()): number {
  return Math.max(1, cores - 1);
}

/** Worker count from `SVC_FACE_RENDER_THREADS` (an integer 0..64), else `defaultRenderThreads()`. */
export function configuredRenderThreads(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env[RENDER_POOL_DEFAULTS.threadsEnv];
  if (raw === undefined || raw.trim() === '') return defaultRenderThreads();
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > RENDER_POOL_DEFAULTS.maxThreads) {
    throw new RangeError(`${RENDER_POOL_DEFAULTS.threadsEnv} must be an integer from 0 to ${RENDER_POOL_DEFAULTS.maxThreads} (0 renders on the main thread), got ${JSON.stringify(raw)}`);
  }
  return n;
}

/** A session failed because of its render worker (crash, kill, pool closed, render error). */
export class FaceRenderError extends Error {
  constructor(message: string, readonly workerName?: string) {
    super(message);
    this.name = 'FaceRenderError';
  }
}

type Request = Extract<RenderWorkerRequest, { req: number }>;
type WithoutReq<T> = T extends unknown ? Omit<T, 'req'> : never;

interface Pending {
  resolve(reply: RenderWorkerReply): void;
  reject(err: Error): void;
}

const WORKER_URL = new URL('./render-worker-boot.mjs', import.meta.url);
const WORKER_ENTRY = new URL('./render-worker.ts', import.meta.url).href;

/** One worker thread, its in-flight requests and the rasters (sessions) it holds. */
class RenderWorkerSlot {
  readonly worker: Worker;
  readonly rasters = new Set<WorkerFaceRaster>();
  /** Opens in progress (counted as sessions, so an idle shutdown cannot race them). */
  opening = 0;
  private readonly pending = new Map<number, Pending>();
  private nextReq = 1;
  /** Set once the worker is gone (crashed or terminated): every later request fails with it. */
  dead: Error | null = null;
  private stopping = false;

  constructor(private readonly onDeath: (slot: RenderWorkerSlot) => void) {
    // No inherited flags: the parent's (`--input-type`, `--eval` ...) may not apply to a worker file.
    this.worker = new Worker(WORKER_URL, { workerData: { entry: WORKER_ENTRY }, name: 'svc-face-render', execArgv: [] });
    this.worker.unref();
    this.worker.on('message', (reply: RenderWorkerReply) => {
      const p = this.pending.get(reply.req);
      if (!p) return;
      this.pending.delete(reply.req);
      this.updateRef();
      if (reply.t === 'failed') {
        const err = new FaceRenderError(`face render worker: ${reply.message}`);
        err.name = reply.name === 'Error' ? 'FaceRenderError' : reply.name;
        p.reject(err);
      } else p.resolve(reply);
    });
    this.worker.on('error', (err) => this.die(new FaceRenderError(`face render worker crashed: ${err.message}`)));
    this.worker.on('exit', (code) => this.die(new FaceRenderError(this.stopping ? 'face render pool closed' : `face render worker exited (code ${code})`)));
  }

  get threadId(): number { return this.worker.threadId; }
  get load(): number { return this.rasters.size + this.opening; }

  request(msg: WithoutReq<Request>, transfer: ArrayBuffer[] = []): Promise<RenderWorkerReply> {
    if (this.dead) return Promise.reject(this.dead);
    const req = this.nextReq++;
    return new Promise<RenderWorkerReply>((resolve, reject) => {
      this.pending.set(req, { resolve, reject });
      this.updateRef();
      try {
        this.worker.postMessage({ ...msg, req }, transfer);
      } catch (err) {
        this.pending.delete(req);
        this.updateRef();
        reject(err as Error);
      }
    });
  }

  post(msg: RenderWorkerRequest): void {
    if (!this.dead) this.worker.postMessage(msg);
  }

  /** Referenced only while it owes an answer: an idle pool never keeps the process alive. */
  private updateRef(): void {
    if (this.dead) return;
    if (this.pending.size > 0) this.worker.ref();
    else this.worker.unref();
  }

  terminate(): Promise<number> {
    this.stopping = true;
    return this.worker.terminate();
  }

  private die(err: Error): void {
    if (this.dead) return;
    this.dead = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const r of this.rasters) r.fail(err);
    this.onDeath(this);
  }
}

/** A session's raster living on a render worker. */
export class WorkerFaceRaster implements FaceRaster {
  readonly threaded = true;
  private failure: Error | null = null;
  private closed = false;

  constructor(
    private readonly pool: FaceRenderPool,
    private readonly slot: RenderWorkerSlot,
    readonly key: number,
    readonly geometry: FaceGeometry,
  ) {}

  get width(): number { return this.geometry.width; }
  get height(): number { return this.geometry.height; }
  /** The worker thread rendering this session. */
  get threadId(): number { return this.slot.threadId; }

  async render(pose: FacePose, target?: Uint8Array, format: RasterFormat = 'rgb', jpegQuality?: number): Promise<RasterResult> {
    if (this.failure) throw this.failure;
    if (this.closed) throw new FaceRenderError('face raster is closed');
    // Only a view spanning its whole buffer can be handed over without exposing other memory.
    const own = format !== 'jpeg' && target && target.byteOffset === 0 && target.byteLength === target.buffer.byteLength && target.buffer instanceof ArrayBuffer;
    const buffer = own ? (target.buffer as ArrayBuffer) : null;
    const reply = await this.slot.request({ t: 'render', key: this.key, pose, target: buffer, format, quality: jpegQuality }, buffer ? [buffer] : []);
    if (reply.t !== 'rendered') throw new FaceRenderError(`unexpected reply ${reply.t}`);
    return { image: new Uint8Array(reply.image), mouthGapPx: reply.gap };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.slot.post({ t: 'close', key: this.key });
    this.pool.release(this, this.slot);
  }

  /** The worker died: every later render rejects with `err`. */
  fail(err: Error): void {
    this.failure ??= err;
  }
}

export interface FaceRenderPoolOptions {
  /** Worker threads at most (>= 1). Default: `configuredRenderThreads()` (at least 1). */
  readonly threads?: number;
  readonly idleShutdownMs?: number;
}

export class FaceRenderPool {
  readonly threads: number;
  private readonly idleShutdownMs: number;
  private slots: RenderWorkerSlot[] = [];
  private nextKey = 1;
  private idleTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Workers that died unexpectedly (not terminated by the pool). */
  crashes = 0;

  constructor(options: FaceRenderPoolOptions = {}) {
    const { idleShutdownMs } = resolveOptions(RENDER_POOL_DEFAULTS, options);
    // The thread count's default depends on the machine and the environment, so it is not a declared constant.
    const threads = options.threads ?? Math.max(1, configuredRenderThreads());
    if (!Number.isInteger(threads) || threads < 1 || threads > RENDER_POOL_DEFAULTS.maxThreads) {
      throw new RangeError(`render pool threads must be an integer from 1 to ${RENDER_POOL_DEFAULTS.maxThreads}, got ${threads}`);
    }
    this.threads = threads;
    this.idleShutdownMs = idleShutdownMs;
  }

  /** Live worker threads. */
  get workerCount(): number { return this.slots.length; }
  /** Open rasters (sessions and sources) across the workers. */
  get sessionCount(): number { return this.slots.reduce((n, s) => n + s.load, 0); }

  /** Which worker thread holds how many sessions. */
  describe(): Array<{ threadId: number; sessions: number }> {
    return this.slots.map((s) => ({ threadId: s.threadId, sessions: s.load }));
  }

  /**
   * Builds a session's rig on a worker (the reference is copied there once) and returns its
   * raster. Rejects (that session only) when the rig cannot be built.
   */
  async open(image: RgbImage, landmarks: FaceLandmarks, options: FaceOptions): Promise<WorkerFaceRaster> {
    if (this.closed) throw new FaceRenderError('face render pool is closed');
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const slot = this.pick();
    const key = this.nextKey++;
    slot.opening++;
    try {
      const reply = await slot.request({ t: 'open', key, image: { width: image.width, height: image.height, data: image.data }, landmarks, options });
      if (reply.t !== 'opened') throw new FaceRenderError(`unexpected reply ${reply.t}`);
      const raster = new WorkerFaceRaster(this, slot, key, reply.geometry);
      if (slot.dead) raster.fail(slot.dead);
      slot.rasters.add(raster);
      return raster;
    } finally {
      slot.opening--;
      this.scheduleIdleShutdown();
    }
  }

  /** Fault drill (and tests): terminates a worker as a crash would; its sessions fail. */
  async killWorker(threadId: number): Promise<void> {
    const slot = this.slots.find((s) => s.threadId === threadId);
    if (slot) await slot.worker.terminate();
  }

  /** Terminates every worker now; open rasters fail. The pool refuses new sessions afterwards. */
  async close(): Promise<void> {
    this.closed = true;
    await this.terminateAll();
  }

  /** @internal A raster closed. */
  release(raster: WorkerFaceRaster, slot: RenderWorkerSlot): void {
    slot.rasters.delete(raster);
    this.scheduleIdleShutdown();
  }

  private pick(): RenderWorkerSlot {
    const free = this.slots.find((s) => s.load === 0);
    if (!free && this.slots.length < this.threads) {
      const slot = new RenderWorkerSlot((dead) => this.onDeath(dead));
      this.slots.push(slot);
      return slot;
    }
    return free ?? this.slots.reduce((a, b) => (b.load < a.load ? b : a));
  }

  private onDeath(slot: RenderWorkerSlot): void {
    const i = this.slots.indexOf(slot);
    if (i < 0) return; // terminated by the pool
    this.slots.splice(i, 1);
    this.crashes++;
    this.scheduleIdleShutdown();
  }

  private scheduleIdleShutdown(): void {
    if (this.sessionCount > 0 || this.slots.length === 0) return;
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => void this.terminateAll(), this.idleShutdownMs);
    this.idleTimer.unref();
  }

  private async terminateAll(): Promise<void> {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const slots = this.slots;
    this.slots = [];
    await Promise.all(slots.map((s) => s.terminate()));
  }
}

const shared = new Map<number, FaceRenderPool>();

/**
 * The pool every face model of the process uses: `threads` workers (default: the configured
 * count). Null when the configured count is 0 (render inline).
 */
export function sharedFaceRenderPool(threads: number = configuredRenderThreads()): FaceRenderPool | null {
  if (threads === 0) return null;
  let pool = shared.get(threads);
  if (!pool) {
    pool = new FaceRenderPool({ threads });
    shared.set(threads, pool);
  }
  return pool;
}

/** Terminates the shared pools' workers now (process shutdown; they would not hold it open anyway). */
export async function shutdownFaceRenderPools(): Promise<void> {
  const pools = [...shared.values()];
  shared.clear();
  await Promise.all(pools.map((p) => p.close()));
}
