import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { setImmediate } from 'node:timers/promises';
import { join } from 'node:path';
import type { Registry } from '../../core/registry.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { currentProcess, formatIdentity, isProcessAlive, parseIdentity } from '../db/process-identity.ts';
import { IDLE_VIDEO_GENERATOR_KIND, type IdleVideoGenerator, type IdleVideoRequest } from '../services/generation-jobs.ts';

export const IDLE_VIDEO_DEFAULTS = {
  /** Path segment of `POST /v1/assets/generate/<generator>`: the idle generator of base model 1.0. */
  slug: 'idle-v1',
  durationMs: 6_000,
  frameRate: 25,
  width: 640,
  height: 640,
  /** Face model used when the job's model_variant_id names none. */
  defaultFace: 'human-portrait',
  /** reference_template -> amount of idle head motion (v2 is the renderer's default). */
  motionByTemplate: { v1: 0.6, v2: 1, v3: 1.5 } as Record<string, number>,
  ffmpegPath: 'ffmpeg',
  /** Work folders `<tmpdir>/svc-idle-*`; each holds an `owner` file naming its process. */
  workDirPrefix: 'svc-idle-',
  /** A work folder older than this whose owner is gone is a crash leftover, removed at start-up. */
  staleWorkDirMs: 60 * 60 * 1000,
} as const;

/**
 * The built-in idle video generator: renders the face model's idle loop (blinks, breathing,
 * micro head motion) for the source image through the registry's `face` plugin, and encodes it
 * to H.264 MP4 with ffmpeg.
 */
export class FaceIdleVideoGenerator implements IdleVideoGenerator {
  constructor(private readonly registry: Registry, private readonly options: { readonly ffmpegPath?: string } = {}) {}

  async generate(request: IdleVideoRequest): Promise<{ data: Buffer; contentType: string; name: string }> {
    const face = this.faceSlug(request.modelVariantId);
    const model = this.registry.create<FaceModel>('face', face);
    const d = { ...IDLE_VIDEO_DEFAULTS, ffmpegPath: this.options.ffmpegPath ?? IDLE_VIDEO_DEFAULTS.ffmpegPath };
    const source = await model.openSource({
      referenceImage: new Uint8Array(request.sourceImage),
      configuration: { width: d.width, height: d.height, motion_scale: d.motionByTemplate[request.referenceTemplate ?? 'v2'] ?? 1 },
      imageFormat: 'rgb',
    });
    const frames = Math.round((d.durationMs / 1000) * d.frameRate);
    const dir = await mkdtemp(join(tmpdir(), d.workDirPrefix));
    const out = join(dir, 'idle.mp4');
    let encoder: { readonly process: ChildProcess; readonly gone: Promise<unknown> } | null = null;
    let stopEncoder: (() => void) | undefined;
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<'aborted'>((resolve) => {
      onAbort = () => resolve('aborted');
      if (request.signal.aborted) onAbort();
      else request.signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      await writeFile(join(dir, 'owner'), formatIdentity(currentProcess()));
      const ffmpeg = spawn(d.ffmpegPath, [
        '-hide_banner', '-loglevel', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${source.width}x${source.height}`,
        '-r', String(d.frameRate), '-i', 'pipe:0', '-c:v', 'libx264', '-preset', 'veryfast', '-pix_fmt', 'yuv420p', '-movflags', '+faststart', out,
      ]);
      let stderr = '';
      ffmpeg.stderr.on('data', (c) => (stderr += c));
      // ffmpeg missing (ENOENT) or dying early must fail the job, never leave it waiting on a pipe.
      const exited = new Promise<number | null>((resolve, reject) => {
        ffmpeg.once('error', (err) => reject(new Error(`cannot run ffmpeg (${d.ffmpegPath}): ${err.message}`)));
        ffmpeg.once('close', resolve);
      });
      exited.catch(() => undefined);
      const gone = exited.then(() => 'exited' as const, () => 'exited' as const);
      encoder = { process: ffmpeg, gone };
      ffmpeg.stdin.on('error', () => undefined);
      // An abort (the attempt's time limit, the worker closing) also ends a wait on the encoder:
      // its pipe draining, or its exit after the last frame.
      stopEncoder = () => ffmpeg.kill('SIGKILL');
      request.signal.addEventListener('abort', stopEncoder, { once: true });
      for (let i = 0; i < frames; i++) {
        if (request.signal.aborted) throw new Error('generation aborted');
        // Yield to the event loop between frames: rendering and piping resolve without waiting,
        // and a whole video in one go would starve the process (lease heartbeats, live sessions).
        await setImmediate();
        // A renderer that stopped answering must not hold the generation past an abort either.
        const frame = await Promise.race([source.nextFrame(), aborted]);
        if (frame === 'aborted') throw new Error('generation aborted');
        if (!ffmpeg.stdin.write(frame.image.data)) {
          const waited = await Promise.race([new Promise<'drained'>((r) => ffmpeg.stdin.once('drain', () => r('drained'))), gone]);
          if (waited === 'exited') break;
        }
      }
      ffmpeg.stdin.end();
      const code = await exited;
      if (request.signal.aborted) throw new Error('generation aborted');
      if (code !== 0) throw new Error(`ffmpeg failed (${code}): ${stderr.trim().slice(0, 500)}`);
      return { data: await readFile(out), contentType: 'video/mp4', name: `idle-${face}.mp4` };
    } finally {
      if (stopEncoder) request.signal.removeEventListener('abort', stopEncoder);
      if (onAbort) request.signal.removeEventListener('abort', onAbort);
      // Whatever ended the rendering early (an abort, the face model throwing, a write failing):
      // the encoder is stopped and gone before its folder is removed, never left running.
      if (encoder && encoder.process.exitCode === null && encoder.process.signalCode === null) {
        encoder.process.kill('SIGKILL');
        await encoder.gone;
      }
      source.close?.();
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** `svc/human-presence/v1` -> `human-presence` when that face is registered. */
  private faceSlug(modelVariantId: string | null): string {
    const faces = this.registry.slugs('face');
    const named = modelVariantId?.split('/')[1];
    if (named && faces.includes(named)) return named;
    if (faces.includes(IDLE_VIDEO_DEFAULTS.defaultFace)) return IDLE_VIDEO_DEFAULTS.defaultFace;
    if (faces[0]) return faces[0];
    throw new Error('no face model is installed (load the face plugin)');
  }
}

/** Registers the built-in generator unless a plugin already provides one under the same slug. */
export function registerIdleVideoGenerator(registry: Registry, options: { readonly ffmpegPath?: string } = {}): void {
  if (registry.has(IDLE_VIDEO_GENERATOR_KIND, IDLE_VIDEO_DEFAULTS.slug)) return;
  registry.register<IdleVideoGenerator>(IDLE_VIDEO_GENERATOR_KIND, IDLE_VIDEO_DEFAULTS.slug, (_o, r) => new FaceIdleVideoGenerator(r, options), {
    label: 'Idle video (face model idle loop, H.264 MP4)',
  });
}

/**
 * Removes idle-video work folders a crashed process left behind: `<dir>/svc-idle-*` older than
 * `olderThanMs` whose `owner` (pid and start time) no longer runs. A live owner's folder, even an
 * old one, is kept. Returns the removed paths.
 */
export async function sweepStaleWorkDirs(dir: string = tmpdir(), olderThanMs: number = IDLE_VIDEO_DEFAULTS.staleWorkDirMs, nowMs: number = Date.now()): Promise<string[]> {
  const removed: string[] = [];
  for (const name of await readdir(dir)) {
    if (!name.startsWith(IDLE_VIDEO_DEFAULTS.workDirPrefix)) continue;
    const path = join(dir, name);
    try {
      const info = await stat(path);
      if (!info.isDirectory() || nowMs - info.mtimeMs < olderThanMs) continue;
      const owner = parseIdentity(await readFile(join(path, 'owner'), 'utf8').catch(() => ''));
      if (owner && isProcessAlive(owner)) continue;
      // Without an owner file (older versions), only a folder holding nothing but our output is ours.
      if (!owner && !(await readdir(path)).every((entry) => entry === 'idle.mp4')) continue;
      await rm(path, { recursive: true, force: true });
      removed.push(path);
    } catch {
      // vanished meanwhile, or not ours to read: leave it
    }
  }
  return removed;
}
