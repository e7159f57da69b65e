/**
 * The conversions every publisher relies on: face-frame pictures to I420 (libyuv through wrtc)
 * and 16 kHz frame audio to 10 ms chunks of 48 kHz, four per frame so picture and sound stay in step.
 */
import test from 'ava';
import sharp from 'sharp';
import { createRequire } from 'node:module';
import { FrameAudioResampler, i420ByteLength, imageToI420, rgbaToI420 } from '../../transports/webrtc/index.ts';
import { toneFrame } from './synthetic-face.ts';

const { i420ToRgba } = (createRequire(import.meta.url)('@roamhq/wrtc') as typeof import('@roamhq/wrtc')).nonstandard;

/** BT.601 studio-swing luma, the matrix libyuv's ARGBToI420 uses. */
const luma = (r: number, g: number, b: number) => 16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255;

async function solidJpeg(width: number, height: number, rgb: [number, number, number]): Promise<Uint8Array> {
  return new Uint8Array(await sharp({ create: { width, height, channels: 3, background: { r: rgb[0], g: rgb[1], b: rgb[2] } } }).jpeg({ quality: 95 }).toBuffer());
}

test('a JPEG becomes an I420 picture of the same size with the right luma', async (t) => {
  const frame = await imageToI420({ width: 64, height: 48, format: 'jpeg', data: await solidJpeg(64, 48, [30, 90, 200]) });
  t.is(frame.width, 64);
  t.is(frame.height, 48);
  t.is(frame.data.byteLength, i420ByteLength(64, 48));
  const y = frame.data.subarray(0, 64 * 48);
  const mean = y.reduce((a, v) => a + v, 0) / y.length;
  t.true(Math.abs(mean - luma(30, 90, 200)) < 3, `luma ${mean} vs ${luma(30, 90, 200)}`);
});

test('I420 from a picture converts back to nearly the same colours', async (t) => {
  const width = 80;
  const height = 60;
  const raw = await sharp({ create: { width, height, channels: 3, background: { r: 200, g: 40, b: 60 } } })
    .composite([{ input: await sharp({ create: { width: 40, height: 60, channels: 3, background: { r: 20, g: 220, b: 90 } } }).png().toBuffer(), left: 40, top: 0 }])
    .ensureAlpha()
    .raw()
    .toBuffer();
  const i420 = rgbaToI420(new Uint8Array(raw), width, height);
  const back = new Uint8Array(width * height * 4);
  i420ToRgba({ width, height, data: i420.data }, { width, height, data: back });
  let error = 0;
  for (let i = 0; i < raw.length; i += 4) for (let c = 0; c < 3; c++) error += Math.abs(back[i + c]! - raw[i + c]!);
  t.true(error / (width * height * 3) < 6, `mean error ${error / (width * height * 3)}`);
  // The left half stays red, the right half green.
  t.true(back[(30 * width + 10) * 4]! > 150 && back[(30 * width + 70) * 4 + 1]! > 150);
});

test('raw RGB payloads convert too, and odd sizes are cropped to even', async (t) => {
  const rgb = new Uint8Array(33 * 21 * 3).fill(128);
  const frame = await imageToI420({ width: 33, height: 21, format: 'rgb', data: rgb });
  t.is(frame.width, 32);
  t.is(frame.height, 20);
  t.is(frame.data.byteLength, i420ByteLength(32, 20));
  const y = frame.data[0]!;
  t.true(Math.abs(y - luma(128, 128, 128)) < 2);
});

test('an I420 payload passes through after a size check; broken images are refused', async (t) => {
  const data = new Uint8Array(i420ByteLength(16, 16));
  t.is((await imageToI420({ width: 16, height: 16, format: 'i420', data })).data, data);
  await t.throwsAsync(imageToI420({ width: 16, height: 16, format: 'i420', data: new Uint8Array(10) }), { instanceOf: RangeError });
  await t.throwsAsync(imageToI420({ width: 16, height: 16, format: 'jpeg', data: new Uint8Array([0xff, 0xd8, 1, 2, 3]) }));
  t.throws(() => rgbaToI420(new Uint8Array(4), 1, 1), { instanceOf: RangeError });
});

test('each 40 ms frame of 16 kHz audio yields exactly four 10 ms chunks of 48 kHz', (t) => {
  const resampler = new FrameAudioResampler();
  for (let i = 0; i < 50; i++) {
    const chunks = resampler.push(toneFrame(i, 0.5));
    t.is(chunks.length, 4, `frame ${i}`);
    t.true(chunks.every((c) => c.length === 480));
  }
  const tail = resampler.flush();
  t.true(tail.length <= 1 && tail.every((c) => c.length === 480));
});

test('the resampled tone keeps its pitch and level', (t) => {
  const resampler = new FrameAudioResampler();
  const chunks: Int16Array[] = [];
  for (let i = 0; i < 25; i++) chunks.push(...resampler.push(toneFrame(i, 0.5)));
  const samples = chunks.slice(4).flatMap((c) => [...c]); // skip the first frame's filter onset
  let crossings = 0;
  for (let i = 1; i < samples.length; i++) if (samples[i - 1]! < 0 && samples[i]! >= 0) crossings++;
  const seconds = samples.length / 48_000;
  t.true(Math.abs(crossings / seconds - 440) < 5, `pitch ${crossings / seconds} Hz`);
  const rms = Math.sqrt(samples.reduce((a, v) => a + v * v, 0) / samples.length) / 32768;
  t.true(Math.abs(rms - 0.5 / Math.SQRT2) < 0.01, `rms ${rms}`);
});

test('audio is not delayed behind its frame by more than the filter (about 1 ms)', (t) => {
  const resampler = new FrameAudioResampler();
  const silent = resampler.push(new Int16Array(640));
  const onset = new Int16Array(640).fill(20_000); // a step at the start of frame 1
  const next = resampler.push(onset);
  const all = [...silent, ...next].flatMap((c) => [...c]);
  const firstLoud = all.findIndex((v) => v > 10_000);
  const delaySamples = firstLoud - 1920; // frame 1 starts at output sample 1920
  t.true(delaySamples >= 0 && delaySamples < 72, `onset delayed ${delaySamples} samples at 48 kHz`);
});
