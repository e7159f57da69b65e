/**
 * Facial landmark detection on a worker thread of its own (`WorkerLandmarkDetector`).
 *
 * face-api and tfjs cost about 0.4 s of CPU per new photo and stay loaded afterwards (about
 * 12 MB of JavaScript heap plus their WebAssembly memory). On the event loop that serves the
 * REST API, `/realtime` and the bots, that was a 0.4 s stall of every live session each time a
 * new face was first used, and a larger heap for every later full garbage collection to walk
 * (the collections' pauses show as frame lateness). Here both live in a worker thread that is
 * started on the first detection and stopped `idleShutdownMs` after the last one.
 *
 * In:  {req, image, imageSha256}     Out: {req, landmarks} | {req, error: {name, message, code?}}
 */
import { parentPort, Worker, workerData } from 'node:worker_threads';
import type { FaceLandmarks } from '../../processors/avatar/face-model.ts';
import { FaceModelError, type FaceModelErrorCode } from '../../processors/avatar/face-model.ts';
import { FaceApiLandmarkDetector, type LandmarkDetector, type RgbImage } from './landmark-detector.ts';

export const LANDMARK_WORKER_DEFAULTS = {
  /** The worker (and face-api's memory) is released this long after the last detection. */
  idleShutdownMs: 30_000,
} as const;

interface DetectRequest { req: number; image: RgbImage; imageSha256: string }
type DetectReply =
  | { req: number; landmarks: FaceLandmarks }
  | { req: number; error: { name: string; message: string; code?: string } };

const BOOT_URL = new URL('./render-worker-boot.mjs', import.meta.url);
const ENTRY = new URL('./landmark-worker.ts', import.meta.url).href;

/** A `LandmarkDetector` whose detections run on a worker thread (face-api loaded there only). */
export class WorkerLandmarkDetector implements LandmarkDetector {
  readonly name = 'face-api/ssd-mobilenet-v1+landmark68';
  private count = 0;
  private worker: Worker | null = null;
  private nextReq = 1;
  private readonly pending = new Map<number, { resolve(l: FaceLandmarks): void; reject(e: Error): void }>();
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: { idleShutdownMs?: number } = {}) {}

  get detections(): number { return this.count; }
  /** Whether the worker thread is running (tests, operations). */
  get running(): boolean { return this.worker !== null; }

  detect(image: RgbImage, imageSha256: string): Promise<FaceLandmarks> {
    this.count++;
    clearTimeout(this.idleTimer);
    const worker = this.start();
    const req = this.nextReq++;
    return new Promise<FaceLandmarks>((resolve, reject) => {
      this.pending.set(req, { resolve, reject });
      worker.ref();
      // A copy goes over: the caller's decoded image stays cached and usable.
      worker.postMessage({ req, image: { width: image.width, height: image.height, data: image.data }, imageSha256 } satisfies DetectRequest);
    });
  }

  /** Stops the worker now; detections in flight reject. */
  async close(): Promise<void> {
    clearTimeout(this.idleTimer);
    const worker = this.worker;
    this.worker = null;
    // Its exit no longer reaches the handlers below (they ignore a worker that is not current):
    // the detections it owed are rejected here, or their callers would wait forever.
    const error = new Error('face landmark detector closed');
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
    if (worker) await worker.terminate();
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(BOOT_URL, { workerData: { entry: ENTRY }, name: 'svc-face-landmarks', execArgv: [] });
    worker.unref();
    worker.on('message', (reply: DetectReply) => {
      const p = this.pending.get(reply.req);
      if (!p) return;
      this.pending.delete(reply.req);
      if ('landmarks' in reply) p.resolve(reply.landmarks);
      else if (reply.error.code) p.reject(new FaceModelError(reply.error.code as FaceModelErrorCode, reply.error.message));
      else p.reject(Object.assign(new Error(reply.error.message), { name: reply.error.name }));
      this.settled();
    });
    const die = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = null;
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    worker.on('error', (err) => die(new Error(`face landmark worker crashed: ${err.message}`)));
    worker.on('exit', (code) => die(new Error(`face landmark worker exited (code ${code})`)));
    this.worker = worker;
    return worker;
  }

  private settled(): void {
    if (this.pending.size > 0 || !this.worker) return;
    this.worker.unref();
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => void this.close(), this.options.idleShutdownMs ?? LANDMARK_WORKER_DEFAULTS.idleShutdownMs);
    this.idleTimer.unref();
  }
}

// Worker side: one in-thread detector, detections serialised by it.
if (parentPort && (workerData as { entry?: string } | undefined)?.entry === ENTRY) {
  const port = parentPort;
  const detector = new FaceApiLandmarkDetector();
  port.on('message', (msg: DetectRequest) => {
    detector.detect(msg.image, msg.imageSha256).then(
      (landmarks) => port.postMessage({ req: msg.req, landmarks } satisfies DetectReply),
      (err: unknown) => {
        const e = err instanceof Error ? err : new Error(String(err));
        port.postMessage({ req: msg.req, error: { name: e.name, message: e.message, code: e instanceof FaceModelError ? e.code : undefined } } satisfies DetectReply);
      },
    );
  });
}
