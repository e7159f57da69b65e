import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Plugin } from '../../core/registry.ts';
import type { FaceFrameSource, FaceSessionConfig } from '../../processors/avatar/face-model.ts';
import { IDLE_VIDEO_DEFAULTS } from '../../server/jobs/idle-video-generator.ts';
import { startTestServer, type TestServer } from './harness.ts';
import { until } from '../../testing/until.ts';

const opened: FaceSessionConfig[] = [];

/**
 * A face model registered through the plugin API whose frame source paints a moving gradient:
 * enough to drive the built-in generator end to end (frames -> ffmpeg -> MP4 asset).
 */
const syntheticFacePlugin: Plugin = {
  name: 'synthetic-face',
  register(registry) {
    registry.register('face', 'synthetic', () => ({
      async openSource(config: FaceSessionConfig): Promise<Partial<FaceFrameSource>> {
        opened.push(config);
        const width = Number(config.configuration?.width);
        const height = Number(config.configuration?.height);
        let index = 0;
        return {
          width, height,
          nextFrame() {
            const data = new Uint8Array(width * height * 3);
            for (let i = 0; i < data.length; i += 3) data[i] = (i / 3 + index * 4) % 256;
            const frame = { index, ptsMs: index * 40, type: 'idle', final: false, turnId: null, image: { width, height, format: 'rgb', data }, audio: new Int16Array(640) };
            index++;
            return frame as never;
          },
        };
      },
    }));
  },
};

/** A face model whose frame source fails after a few frames (a face engine crashing mid-render). */
const failingFacePlugin: Plugin = {
  name: 'failing-face',
  register(registry) {
    registry.register('face', 'failing', () => ({
      async openSource(config: FaceSessionConfig): Promise<Partial<FaceFrameSource>> {
        const width = Number(config.configuration?.width);
        const height = Number(config.configuration?.height);
        let index = 0;
        return {
          width, height,
          nextFrame() {
            if (index === 10) throw new Error('the face engine crashed');
            const frame = { index, ptsMs: index * 40, type: 'idle', final: false, turnId: null, image: { width, height, format: 'rgb', data: new Uint8Array(width * height * 3) }, audio: new Int16Array(640) };
            index++;
            return frame as never;
          },
        };
      },
    }));
  },
};

/** A face model whose frame source never answers (a stuck renderer). */
const closedSources: number[] = [];
const stuckFacePlugin: Plugin = {
  name: 'stuck-face',
  register(registry) {
    registry.register('face', 'stuck', () => ({
      async openSource(config: FaceSessionConfig): Promise<Partial<FaceFrameSource>> {
        const width = Number(config.configuration?.width);
        const height = Number(config.configuration?.height);
        let index = 0;
        return {
          width, height,
          nextFrame() {
            if (index === 0) return new Promise<never>(() => undefined);
            const frame = { index, ptsMs: index * 40, type: 'idle', final: false, turnId: null, image: { width, height, format: 'rgb', data: new Uint8Array(width * height * 3) }, audio: new Int16Array(640) };
            index++;
            return frame as never;
          },
          close() {
            closedSources.push(index);
          },
        };
      },
    }));
  },
};

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'idlegen', plugins: [syntheticFacePlugin, failingFacePlugin, stuckFacePlugin] });
});
test.after.always(async () => {
  await s?.stop();
});

test('the built-in idle-v1 generator renders the face model idle loop into an H.264 MP4 asset', async (t) => {
  const res = await s.call('POST', '/v1/assets/generate/idle-v1', {
    body: { source_asset_id: '00000000-0000-4000-8000-0000000000a1', reference_template: 'v3', model_variant_id: 'svc/synthetic/v1' },
  });
  t.is(res.status, 202);
  await s.server.settled();
  const job = (await s.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body;
  t.is(job.status, 'succeeded', job.error ?? '');
  t.is(opened.at(-1)!.configuration!.motion_scale, IDLE_VIDEO_DEFAULTS.motionByTemplate.v3);
  t.true(opened.at(-1)!.referenceImage instanceof Uint8Array, 'the source image bytes are handed to the face model');
  const asset = (await s.call('GET', `/v1/assets/${job.result.asset_id}`)).body;
  t.is(asset.content_type, 'video/mp4');
  t.is(asset.name, 'idle-synthetic.mp4');
  const mp4 = Buffer.from(await (await fetch(asset.asset_url)).arrayBuffer());
  t.is(mp4.subarray(4, 8).toString(), 'ftyp');
  const dir = mkdtempSync(join(tmpdir(), 'svc-idle-test-'));
  try {
    writeFileSync(join(dir, 'v.mp4'), mp4);
    const probe = spawnSync('ffprobe', ['-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries', 'stream=codec_name,width,height,nb_read_frames', '-of', 'json', join(dir, 'v.mp4')]);
    const stream = JSON.parse(probe.stdout.toString()).streams[0];
    t.is(stream.codec_name, 'h264');
    t.is(stream.width, IDLE_VIDEO_DEFAULTS.width);
    t.is(stream.height, IDLE_VIDEO_DEFAULTS.height);
    t.is(Number(stream.nb_read_frames), (IDLE_VIDEO_DEFAULTS.durationMs / 1000) * IDLE_VIDEO_DEFAULTS.frameRate);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('without ffmpeg the generation fails with an error naming it, instead of waiting forever', async (t) => {
  const { FaceIdleVideoGenerator } = await import('../../server/jobs/idle-video-generator.ts');
  const generator = new FaceIdleVideoGenerator(s.server.registry, { ffmpegPath: '/nonexistent/ffmpeg' });
  const error = await t.throwsAsync(generator.generate({
    sourceImage: Buffer.alloc(16), sourceContentType: 'image/png', referenceTemplate: 'v2', modelVariantId: 'svc/synthetic/v1', signal: new AbortController().signal,
  }));
  t.regex(error!.message, /cannot run ffmpeg \(\/nonexistent\/ffmpeg\)/);
});

test('a face model failing mid-render fails the generation and leaves no ffmpeg running', async (t) => {
  const { FaceIdleVideoGenerator } = await import('../../server/jobs/idle-video-generator.ts');
  // ffmpeg started through a script that records its process id (exec keeps it).
  const dir = mkdtempSync(join(tmpdir(), 'svc-idle-ffmpeg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pidFile = join(dir, 'pid');
  const wrapper = join(dir, 'ffmpeg');
  writeFileSync(wrapper, `#!/bin/sh\necho $$ > ${pidFile}\nexec ffmpeg "$@"\n`, { mode: 0o755 });
  const generator = new FaceIdleVideoGenerator(s.server.registry, { ffmpegPath: wrapper });
  const error = await t.throwsAsync(generator.generate({
    sourceImage: Buffer.alloc(16), sourceContentType: 'image/png', referenceTemplate: 'v2', modelVariantId: 'svc/failing/v1', signal: new AbortController().signal,
  }));
  t.regex(error!.message, /the face engine crashed/);
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  t.true(pid > 0);
  t.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, 'the encoder was stopped and reaped before generate() settled');
});

test('an abort (the attempt\'s time limit) ends a generation waiting on a stuck encoder, and leaves no ffmpeg running', async (t) => {
  const { FaceIdleVideoGenerator } = await import('../../server/jobs/idle-video-generator.ts');
  // An "encoder" that never reads its input nor exits: the generation waits on its pipe.
  const dir = mkdtempSync(join(tmpdir(), 'svc-idle-ffmpeg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pidFile = join(dir, 'pid');
  const wrapper = join(dir, 'ffmpeg');
  writeFileSync(wrapper, `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 3600\n`, { mode: 0o755 });
  const generator = new FaceIdleVideoGenerator(s.server.registry, { ffmpegPath: wrapper });
  const abort = new AbortController();
  const generating = generator.generate({
    sourceImage: Buffer.alloc(16), sourceContentType: 'image/png', referenceTemplate: 'v2', modelVariantId: 'svc/synthetic/v1', signal: abort.signal,
  });
  generating.catch(() => undefined);
  await until(() => { try { return Number(readFileSync(pidFile, 'utf8').trim()) > 0; } catch { return false; } }, { timeoutMs: 10_000, what: 'the encoder started' });
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  t.teardown(() => { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } });
  await new Promise((resolve) => setTimeout(resolve, 300)); // the pipe fills: the generation waits for it to drain
  abort.abort();
  const error = await t.throwsAsync(generating);
  t.regex(error!.message, /generation aborted/);
  t.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, 'the encoder was stopped and reaped before generate() settled');
});

test('an abort ends a generation whose renderer stopped answering: the source is closed, no ffmpeg left running', async (t) => {
  const { FaceIdleVideoGenerator } = await import('../../server/jobs/idle-video-generator.ts');
  const dir = mkdtempSync(join(tmpdir(), 'svc-idle-ffmpeg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pidFile = join(dir, 'pid');
  const wrapper = join(dir, 'ffmpeg');
  writeFileSync(wrapper, `#!/bin/sh\necho $$ > ${pidFile}\nexec ffmpeg "$@"\n`, { mode: 0o755 });
  const generator = new FaceIdleVideoGenerator(s.server.registry, { ffmpegPath: wrapper });
  const abort = new AbortController();
  const generating = generator.generate({
    sourceImage: Buffer.alloc(16), sourceContentType: 'image/png', referenceTemplate: 'v2', modelVariantId: 'svc/stuck/v1', signal: abort.signal,
  });
  generating.catch(() => undefined);
  await until(() => { try { return Number(readFileSync(pidFile, 'utf8').trim()) > 0; } catch { return false; } }, { timeoutMs: 10_000, what: 'the encoder started' });
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  t.teardown(() => { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } });
  await new Promise((resolve) => setTimeout(resolve, 200)); // waiting on the renderer's first frame
  const closedBefore = closedSources.length;
  abort.abort();
  const error = await t.throwsAsync(generating);
  t.regex(error!.message, /generation aborted/);
  t.is(closedSources.length, closedBefore + 1, 'the frame source was closed');
  t.is(closedSources.at(-1), 0, 'it never rendered: the wait was on the renderer');
  t.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, 'the encoder was stopped and reaped before generate() settled');
});
