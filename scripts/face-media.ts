/**
 * Media for docs/face-models.md: a contact sheet of the mouth (16 frames across a spoken phrase,
 * cropped around the mouth and zoomed 2x with pixel doubling, so every edge pixel shows as it
 * is) and, with `--mp4`, a 10 s MP4 of each model on the same speech.
 *
 *   npx tsx scripts/face-media.ts --tag before            # docs/media/face-mouth-before.png
 *   npx tsx scripts/face-media.ts --tag after --mp4       # + docs/media/face-<variant>-10s.mp4
 *
 * Renders inline (no worker pool) at 1280x720 with the default face and a fixed seed.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import sharp from 'sharp';
import type { FaceFrame } from '../processors/avatar/face-model.ts';
import { HumanFaceModel } from '../plugins/face/index.ts';
import { syntheticPhrase } from '../test/face/speech-signal.ts';

const args = process.argv.slice(2);
const tag = args[args.indexOf('--tag') + 1] ?? 'after';
const wantMp4 = args.includes('--mp4');
const W = 1280, H = 720;

async function renderPhrase(variant: 'human-portrait' | 'human-presence', pcm: Int16Array, leadFrames: number, totalFrames?: number) {
  const model = new HumanFaceModel(variant, { renderThreads: 0 });
  const source = await model.openSource({ configuration: { width: W, height: H, seed: 11 } });
  const frames: FaceFrame[] = [];
  for (let i = 0; i < leadFrames; i++) frames.push(await source.nextFrame());
  source.pushAudio(pcm);
  source.endTurn();
  for (;;) {
    const f = await source.nextFrame();
    frames.push(f);
    if (totalFrames === undefined ? f.final : frames.length >= totalFrames) break;
  }
  const geometry = source.geometry;
  source.close();
  return { frames, geometry };
}

async function mouthSheet(file: string, variant: 'human-portrait' | 'human-presence') {
  const { frames, geometry } = await renderPhrase(variant, syntheticPhrase(16), 0);
  const speech = frames.filter((f) => f.type === 'speech' || f.type === 'speech-start');
  const picks = Array.from({ length: 16 }, (_, i) => speech[Math.floor((i * speech.length) / 16)]!);
  const cw = Math.round(geometry.faceWidth * 0.62), ch = Math.round(geometry.faceWidth * 0.42);
  const left = Math.round(geometry.mouthCentre.x - cw / 2), top = Math.round(geometry.mouthCentre.y - ch * 0.42);
  const tw = cw * 2, th = ch * 2;
  const tiles = await Promise.all(picks.map(async (f, i) => ({
    input: await sharp(f.image.data, { raw: { width: W, height: H, channels: 3 } })
      .extract({ left, top, width: cw, height: ch })
      .resize(tw, th, { kernel: 'nearest' }).png().toBuffer(),
    left: (i % 4) * (tw + 4), top: Math.floor(i / 4) * (th + 4),
  })));
  await sharp({ create: { width: 4 * tw + 12, height: 4 * th + 12, channels: 3, background: '#000' } })
    .composite(tiles).png({ compressionLevel: 9 }).toFile(file);
  console.log(`wrote ${file} (${variant}, mouth crop ${cw}x${ch} at 2x)`);
}

async function mp4(variant: 'human-portrait' | 'human-presence') {
  // 10 s: 0.8 s idle, a phrase, a pause, another phrase, idle to the end.
  const a = syntheticPhrase(12), b = syntheticPhrase(9);
  const pause = new Int16Array(16_000 * 0.6);
  const pcm = new Int16Array(a.length + pause.length + b.length);
  pcm.set(a, 0); pcm.set(b, a.length + pause.length);
  const { frames } = await renderPhrase(variant, pcm, 20, 250);
  mkdirSync('bench/out', { recursive: true });
  const rgb = `bench/out/face-${variant}.rgb`, raw = `bench/out/face-${variant}.pcm`;
  writeFileSync(rgb, Buffer.concat(frames.map((f) => Buffer.from(f.image.data))));
  const audio = new Int16Array(frames.length * 640);
  frames.forEach((f, i) => audio.set(f.audio, i * 640));
  writeFileSync(raw, Buffer.from(audio.buffer));
  const out = `docs/media/face-${variant}-10s.mp4`;
  execFileSync('ffmpeg', ['-y', '-loglevel', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${W}x${H}`, '-r', '25', '-i', rgb,
    '-f', 's16le', '-ar', '16000', '-ac', '1', '-i', raw, '-c:v', 'libx264', '-preset', 'medium', '-pix_fmt', 'yuv420p', '-crf', '24',
    '-c:a', 'aac', '-b:a', '64k', '-shortest', '-movflags', '+faststart', out]);
  rmSync(rgb); rmSync(raw);
  console.log(`wrote ${out} (${frames.length} frames)`);
}

mkdirSync('docs/media', { recursive: true });
await mouthSheet(`docs/media/face-mouth-${tag}.png`, 'human-portrait');
if (wantMp4) for (const v of ['human-portrait', 'human-presence'] as const) await mp4(v);
