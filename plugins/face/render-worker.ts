/**
 * A face render worker thread (started by `render-pool.ts` through render-worker-boot.mjs).
 * It keeps one `FaceRenderer` per session key: built from the decoded reference, its landmarks
 * and the session options (the same `buildFaceRig` as inline rendering), and renders poses
 * into the buffer the main thread transferred, then transfers it back.
 *
 * In:  {t:'open', key, req, image, landmarks, options} | {t:'render', key, req, pose, target, format?}
 *      | {t:'close', key}
 * `format: 'i420'` converts the rendered picture to I420 here (plugins/face/i420.ts), so the
 * event loop gets what a WebRTC video source takes; the RGB canvas then stays in the worker.
 * `format: 'jpeg'` encodes it here (sharp, `quality`): only the JPEG bytes cross back, and the
 * event loop of a `/realtime` session neither receives 2.7 MB per 720p frame nor encodes it.
 * Renders of one session run and are answered in order (a JPEG render is asynchronous).
 * Out: {t:'opened', req, geometry} | {t:'rendered', req, image, gap} | {t:'failed', req, message, name}
 */
import { parentPort } from 'node:worker_threads';
import type { FaceLandmarks } from '../../processors/avatar/face-model.ts';
import type { FaceOptions } from './configuration.ts';
import { REST_POSE, type FacePose } from './face-pose.ts';
import { encodeRgbJpeg, rigGeometry, type RasterFormat } from './face-raster.ts';
import { FaceRenderer } from './face-renderer.ts';
import { buildFaceRig } from './face-rig.ts';
import { i420Length } from './i420.ts';
import type { RgbImage } from './landmark-detector.ts';

export type RenderWorkerRequest =
  | { t: 'open'; key: number; req: number; image: RgbImage; landmarks: FaceLandmarks; options: FaceOptions }
  | { t: 'render'; key: number; req: number; pose: FacePose; target: ArrayBuffer | null; format?: RasterFormat; quality?: number }
  | { t: 'close'; key: number };

export type RenderWorkerReply =
  | { t: 'opened'; req: number; geometry: ReturnType<typeof rigGeometry> }
  | { t: 'rendered'; req: number; image: ArrayBuffer; gap: number }
  | { t: 'failed'; req: number; message: string; name: string };

const port = parentPort!;
const renderers = new Map<number, FaceRenderer>();
/** The last render of each session still in progress (the next one waits for it; never rejects). */
const chains = new Map<number, Promise<void>>();
/** Opens still building their rig: a close that arrives first cancels the open. */
const opening = new Set<number>();

const fail = (req: number, err: unknown) => {
  const e = err instanceof Error ? err : new Error(String(err));
  port.postMessage({ t: 'failed', req, message: e.message, name: e.name } satisfies RenderWorkerReply);
};

port.on('message', (msg: RenderWorkerRequest) => {
  if (msg.t === 'open') {
    opening.add(msg.key);
    buildFaceRig(msg.image, msg.landmarks, msg.options).then(
      (rig) => {
        if (!opening.delete(msg.key)) return fail(msg.req, new Error('face session closed while it opened'));
        const renderer = new FaceRenderer(rig);
        // One draw now: the first draw of a renderer touches its canvas and kernel memory for
        // the first time (~20 ms at 720p), which would make the session's frame 0 late.
        renderer.draw(REST_POSE);
        renderers.set(msg.key, renderer);
        port.postMessage({ t: 'opened', req: msg.req, geometry: rigGeometry(rig) } satisfies RenderWorkerReply);
      },
      (err: unknown) => { opening.delete(msg.key); fail(msg.req, err); },
    );
  } else if (msg.t === 'render') {
    const renderer = renderers.get(msg.key);
    if (!renderer) return fail(msg.req, new Error(`no face renderer for session ${msg.key} on this worker`));
    // Renders of one session run one after another: a JPEG render's encoder reads the renderer's
    // canvas asynchronously, and no later render (of any format) may draw over it meanwhile.
    const previous = chains.get(msg.key) ?? Promise.resolve();
    const done = previous.then(() => render(renderer, msg));
    chains.set(msg.key, done);
    void done.then(() => { if (chains.get(msg.key) === done) chains.delete(msg.key); });
  } else if (msg.t === 'close') {
    opening.delete(msg.key);
    renderers.delete(msg.key);
  }
});

async function render(renderer: FaceRenderer, msg: Extract<RenderWorkerRequest, { t: 'render' }>): Promise<void> {
  try {
    let image: ArrayBuffer;
    if (msg.format === 'jpeg') {
      const jpeg = await encodeRgbJpeg(renderer.draw(msg.pose), renderer.width, renderer.height, msg.quality ?? 85);
      // sharp's output memory cannot be transferred (Node marks it untransferable; from Node 21
      // postMessage refuses it): copy the ~100 KB into a buffer of our own, which moves.
      image = jpeg.slice().buffer as ArrayBuffer;
    } else if (msg.format === 'i420') {
      const length = i420Length(renderer.width, renderer.height);
      const target = msg.target && msg.target.byteLength === length ? new Uint8Array(msg.target) : new Uint8Array(length);
      image = renderer.drawI420(msg.pose, target).buffer as ArrayBuffer;
    } else {
      const out = renderer.render(msg.pose, msg.target ? new Uint8Array(msg.target) : undefined);
      // `out` spans its whole buffer (the transferred target, or a fresh copy of the base canvas).
      image = out.buffer as ArrayBuffer;
    }
    port.postMessage({ t: 'rendered', req: msg.req, image, gap: renderer.mouthGapPx() } satisfies RenderWorkerReply, [image]);
  } catch (err) {
    fail(msg.req, err);
  }
}
