/**
 * Media for docs/face-models.md.
 *
 *   npx tsx scripts/face-media.ts --tag after --mp4 --listening
 *   npx tsx scripts/face-media.ts --tag before --root /path/to/a/checkout/of/the/previous/face
 *
 * - Lip sheets (`docs/media/face-lips-<variant>-<tag>.png`, issue #29): an eSpeak-NG sentence
 *   rich in m b p / oo o w / f v / ee, one frame at the middle of each sound, cropped around the
 *   mouth and zoomed 2x with pixel doubling (every edge pixel shows as rendered), the phoneme and
 *   time under each frame. Fed as a TTS and the avatar processor feed a face: 200 ms chunks,
 *   each with the phonemes starting in it. `--root` renders with the face plugin of another
 *   checkout (the "before" sheets: the code before #29).
 * - `--mp4`: 10 s of each model speaking two eSpeak sentences, with sound, 1280x720
 *   (`docs/media/face-<variant>-10s.mp4`).
 * - `--listening` (issue #28): the head while a visitor (eSpeak) speaks, every 5th frame, above
 *   the same frames of the same seeded face with nobody speaking
 *   (`docs/media/face-listening-<variant>.png`).
 *
 * Renders inline (no worker pool) with the default face and a fixed seed.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import sharp from 'sharp';
import type { PhonemeTiming } from '../core/frames.ts';
import type { FaceFrame } from '../processors/avatar/face-model.ts';
import { synthesize } from '../test/face/phoneme-corpus.ts';

const args = process.argv.slice(2);
const arg = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const tag = arg('--tag') ?? 'after';
const root = resolve(arg('--root') ?? '.');
const W = 1280, H = 720;
const SENTENCE = 'Maybe we should move five blue boats over the deep sea.';
const SILENCE = '_';

type Variant = 'human-portrait' | 'human-presence';
interface Geometry { faceWidth: number; faceHeight: number; mouthCentre: { x: number; y: number }; headCentre: { x: number; y: number } }
interface Source {
  startTurn(): void;
  pushAudio(pcm: Int16Array, turn?: { phonemes?: readonly PhonemeTiming[] }): void;
  endTurn(): void;
  nextFrame(): Promise<FaceFrame>;
  listen?(pcm: Int16Array | null): void;
  close(): void;
  readonly geometry: Geometry;
}

const plugin = await import(`${root}/plugins/face/index.ts`);
async function openSource(variant: Variant, width = W, height = H): Promise<Source> {
  const model = new plugin.HumanFaceModel(variant, { renderThreads: 0 });
  return model.openSource({ configuration: { width, height, seed: 11 } });
}

/** Plays `pcm` as a turn in 200 ms chunks, each with the phonemes that start in it; `lead` idle frames before. */
async function play(source: Source, pcm: Int16Array, phonemes: readonly PhonemeTiming[], leadFrames: number, totalFrames?: number): Promise<FaceFrame[]> {
  const frames: FaceFrame[] = [];
  for (let i = 0; i < leadFrames; i++) frames.push(await source.nextFrame());
  source.startTurn();
  for (let at = 0; at < pcm.length; at += 3200) {
    const from = at / 16, to = Math.min(pcm.length, at + 3200) / 16;
    const chunk = phonemes.filter((p) => p.startMs >= from && p.startMs < to);
    source.pushAudio(pcm.subarray(at, at + 3200), chunk.length ? { phonemes: chunk } : undefined);
  }
  source.endTurn();
  for (;;) {
    const f = await source.nextFrame();
    frames.push(f);
    if (totalFrames === undefined ? f.final : frames.length >= totalFrames) break;
  }
  return frames;
}

const label = (text: string, width: number, height: number) => Buffer.from(
  `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"><rect width="100%" height="100%" fill="#111"/>`
  + `<text x="50%" y="${height - 9}" font-family="DejaVu Sans" font-size="${Math.round(height * 0.62)}" fill="#eee" text-anchor="middle">${text.replace(/&/g, '&amp;').replace(/</g, '&lt;')}</text></svg>`,
);

async function sheet(file: string, tiles: Array<{ image: Uint8Array; width: number; height: number; crop: { left: number; top: number; width: number; height: number }; text: string }>, columns: number, zoom: number) {
  const tw = tiles[0]!.crop.width * zoom, th = tiles[0]!.crop.height * zoom, lh = 30, gap = 4;
  const composite = (await Promise.all(tiles.map(async (t, i) => {
    const left = (i % columns) * (tw + gap), top = Math.floor(i / columns) * (th + lh + gap);
    const picture = await sharp(t.image, { raw: { width: t.width, height: t.height, channels: 3 } }).extract(t.crop).resize(tw, th, { kernel: 'nearest' }).png().toBuffer();
    return [{ input: picture, left, top }, { input: label(t.text, tw, lh), left, top: top + th }];
  }))).flat();
  const rows = Math.ceil(tiles.length / columns);
  await sharp({ create: { width: columns * (tw + gap) - gap, height: rows * (th + lh + gap) - gap, channels: 3, background: '#000' } })
    .composite(composite).png({ compressionLevel: 9 }).toFile(file);
  console.log(`wrote ${file} (${tiles.length} frames)`);
}

async function lipSheet(variant: Variant) {
  const u = await synthesize(SENTENCE, 'en-us', 165);
  const source = await openSource(variant);
  const frames = (await play(source, u.pcm, u.phonemes, 5)).slice(5);
  const g = source.geometry;
  source.close();
  const cw = Math.round(g.faceWidth * 0.62), ch = Math.round(g.faceWidth * 0.42);
  const crop = { left: Math.round(g.mouthCentre.x - cw / 2), top: Math.round(g.mouthCentre.y - ch * 0.42), width: cw, height: ch };
  // One frame per sound: the frame whose audio holds the middle of the phoneme.
  const tiles = u.phonemes.filter((p) => p.phoneme !== SILENCE).map((p) => {
    const mid = (p.startMs + p.endMs) / 2, f = frames[Math.min(frames.length - 1, Math.floor(mid / 40))]!;
    return { image: f.image.data, width: W, height: H, crop, text: `${p.phoneme}  ${Math.round(mid)} ms` };
  });
  await sheet(`docs/media/face-lips-${variant}-${tag}.png`, tiles, 6, 2);
}

async function mp4(variant: Variant) {
  const a = await synthesize('Maybe we should move five blue boats over the deep sea.', 'en-us', 165);
  const b = await synthesize('People often buy food for the poor, which is wonderful.', 'en-us', 165);
  const pauseMs = 700;
  const pcm = new Int16Array(a.pcm.length + pauseMs * 16 + b.pcm.length);
  pcm.set(a.pcm, 0); pcm.set(b.pcm, a.pcm.length + pauseMs * 16);
  const shift = a.pcm.length / 16 + pauseMs;
  const phonemes = [...a.phonemes, { phoneme: SILENCE, startMs: a.pcm.length / 16, endMs: shift }, ...b.phonemes.map((p) => ({ ...p, startMs: p.startMs + shift, endMs: p.endMs + shift }))];
  const source = await openSource(variant);
  const frames = await play(source, pcm, phonemes, 15, 250);
  source.close();
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

async function listeningSheet(variant: Variant) {
  const voice = await synthesize('Could you tell me what the weather will be like tomorrow in Paris?', 'en', 165);
  const w = 640, h = 360, lead = 10;
  const run = async (speaks: boolean) => {
    const source = await openSource(variant, w, h);
    const frames: FaceFrame[] = [];
    for (let i = 0; i < lead; i++) frames.push(await source.nextFrame());
    for (let at = 0; at < voice.pcm.length; at += 640) {
      if (speaks) source.listen!(voice.pcm.subarray(at, at + 640));
      frames.push(await source.nextFrame());
    }
    if (speaks) source.listen!(null);
    const g = source.geometry;
    source.close();
    return { frames: frames.slice(lead), g };
  };
  const heard = await run(true), alone = await run(false);
  const g = heard.g, side = Math.round(Math.min(h, 2.1 * g.faceHeight));
  const crop = { left: Math.round(g.headCentre.x - side / 2), top: Math.max(0, Math.round(g.headCentre.y - side * 0.5)), width: side, height: Math.min(side, h - Math.max(0, Math.round(g.headCentre.y - side * 0.5))) };
  const picks = Array.from({ length: 8 }, (_, i) => Math.min(heard.frames.length - 1, i * 5 + 5));
  const tiles = [
    ...picks.map((i) => ({ image: heard.frames[i]!.image.data, width: w, height: h, crop, text: `listening ${i * 40} ms` })),
    ...picks.map((i) => ({ image: alone.frames[i]!.image.data, width: w, height: h, crop, text: `alone ${i * 40} ms` })),
  ];
  await sheet(`docs/media/face-listening-${variant}.png`, tiles, 8, 1);
}

mkdirSync('docs/media', { recursive: true });
for (const v of ['human-portrait', 'human-presence'] as const) await lipSheet(v);
if (args.includes('--mp4')) for (const v of ['human-portrait', 'human-presence'] as const) await mp4(v);
if (args.includes('--listening')) for (const v of ['human-presence', 'human-portrait'] as const) await listeningSheet(v);
process.exit(0);
