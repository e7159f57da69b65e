import test from 'ava';
import {
  AudioChunker,
  Resampler,
  bytesToInt16,
  chunkAudio,
  concat,
  float32ToInt16,
  int16ToBytes,
  int16ToFloat32,
  mix,
  resample,
  rms,
  silence,
  toMono,
} from '../../core/audio.ts';

function tone(hz: number, rate: number, ms: number, amp = 10_000): Int16Array {
  const n = Math.round((rate * ms) / 1000);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.round(amp * Math.sin((2 * Math.PI * hz * i) / rate));
  return out;
}

const RATES = [8000, 16000, 22050, 24000, 44100, 48000];

for (const from of RATES) {
  for (const to of RATES) {
    if (from === to) continue;
    test(`resampling ${from} -> ${to} keeps a 300 Hz tone within 1% and the expected length`, (t) => {
      const input = tone(300, from, 500);
      const out = resample(input, from, to);
      t.is(out.length, Math.round((input.length * to) / from));
      let worst = 0;
      // Skip the filter's edges, where the signal starts and stops abruptly.
      for (let i = 100; i < out.length - 100; i++) {
        worst = Math.max(worst, Math.abs(out[i]! - 10_000 * Math.sin((2 * Math.PI * 300 * i) / to)));
      }
      t.true(worst < 100, `worst error ${worst}`);
    });
  }
}

// Integer rates go through precomputed polyphase weights; a rate that is not an integer (a
// drifting clock's) takes the general path, which interpolates the kernel per tap.
for (const [from, to] of [[44_100, 16_000.5], [15_999.5, 48_000]] as const) {
  test(`the general path (${from} -> ${to}): the same 300 Hz tone within 1%, and streaming equals one-shot`, (t) => {
    const input = tone(300, from, 500);
    const out = resample(input, from, to);
    t.true(Math.abs(out.length - (input.length * to) / from) <= 1, `${out.length} samples`);
    let worst = 0;
    for (let i = 100; i < out.length - 100; i++) worst = Math.max(worst, Math.abs(out[i]! - 10_000 * Math.sin((2 * Math.PI * 300 * i) / to)));
    t.true(worst < 100, `worst error ${worst}`);
    const r = new Resampler(from, to);
    const parts = [...chunkAudio(input, Math.round(from), 20)].map((chunk) => r.process(chunk));
    parts.push(r.flush());
    t.deepEqual(Array.from(concat(parts)), Array.from(out));
  });
}

test('downsampling removes content above the new Nyquist frequency (no aliasing)', (t) => {
  const out = resample(tone(10_000, 48_000, 500), 48_000, 16_000);
  t.true(rms(out.subarray(200, -200)) < 0.003, `alias level ${rms(out)}`);
  const passband = resample(tone(3_000, 48_000, 500), 48_000, 16_000);
  t.true(rms(passband.subarray(200, -200)) > 0.2);
});

test('streaming resampling in 20 ms chunks equals one-shot resampling', (t) => {
  const input = tone(440, 44_100, 1000);
  const r = new Resampler(44_100, 16_000);
  const parts: Int16Array[] = [];
  for (const chunk of chunkAudio(input, 44_100, 20)) parts.push(r.process(chunk));
  parts.push(r.flush());
  t.deepEqual(Array.from(concat(parts)), Array.from(resample(input, 44_100, 16_000)));
});

test('streaming in chunks of any size, from 1 sample to 3 s, loses and adds nothing, up and down, at integer and other ratios', (t) => {
  // The resampler writes each call's outputs into a buffer it keeps, sized from the input it holds:
  // a size too small there would drop samples silently, so every path is fed odd chunk sizes here.
  const sizes = [1, 2, 7, 160, 441, 1920, 3001, 48_000, 144_000];
  for (const [from, to] of [[16_000, 48_000], [48_000, 16_000], [22_050, 16_000], [16_000, 44_100], [24_000, 24_001]] as const) {
    const input = tone(523, from, 3500);
    const whole = resample(input, from, to);
    const r = new Resampler(from, to);
    const parts: Int16Array[] = [];
    for (let at = 0, i = 0; at < input.length; i++) {
      const size = sizes[i % sizes.length]!;
      parts.push(r.process(input.subarray(at, at + size)));
      at += size;
    }
    parts.push(r.flush());
    const streamed = concat(parts);
    t.is(streamed.length, whole.length, `${from} -> ${to}`);
    t.deepEqual(Array.from(streamed), Array.from(whole), `${from} -> ${to}`);
  }
});

test('a resampler refuses nonsensical rates', (t) => {
  t.throws(() => new Resampler(0, 16_000), { instanceOf: RangeError });
});

test('int16 and float32 conversions round-trip and clip', (t) => {
  const pcm = new Int16Array([0, 1, -1, 32767, -32768, 1234]);
  t.deepEqual(Array.from(float32ToInt16(int16ToFloat32(pcm))), Array.from(pcm));
  t.deepEqual(Array.from(float32ToInt16(new Float32Array([2, -2]))), [32767, -32768]);
});

test('bytes and int16 views convert both ways, including from unaligned buffers', (t) => {
  const pcm = new Int16Array([1, -2, 300]);
  const bytes = int16ToBytes(pcm);
  t.deepEqual(Array.from(bytesToInt16(bytes)), [1, -2, 300]);
  const unaligned = new Uint8Array(bytes.length + 1);
  unaligned.set(bytes, 1);
  t.deepEqual(Array.from(bytesToInt16(unaligned.subarray(1))), [1, -2, 300]);
});

test('chunkAudio cuts exact durations and keeps the remainder', (t) => {
  const chunks = [...chunkAudio(new Int16Array(16_000 + 100), 16_000, 20)];
  t.is(chunks.length, 51);
  t.true(chunks.slice(0, 50).every((c) => c.length === 320));
  t.is(chunks[50]!.length, 100);
});

test('AudioChunker re-chunks a stream of odd sizes into fixed chunks', (t) => {
  const chunker = new AudioChunker(16_000, 40);
  const out: Int16Array[] = [];
  let sent = 0;
  for (const size of [100, 1000, 7, 333, 2000]) {
    const pcm = new Int16Array(size).map((_, i) => sent + i);
    sent += size;
    out.push(...chunker.push(pcm));
  }
  t.true(out.every((c) => c.length === 640));
  t.is(out.length, Math.floor(sent / 640));
  t.is(chunker.pendingSamples, sent % 640);
  const joined = concat(out);
  t.true(joined.every((v, i) => v === i), 'samples keep their order');
  const rest = chunker.flush()!;
  t.is(rest.length, 640);
  t.is(rest[0], out.length * 640);
  t.is(chunker.flush(), undefined);
});

test('mix sums with saturation; silence and toMono behave', (t) => {
  t.deepEqual(Array.from(mix(new Int16Array([30_000, -30_000, 5]), new Int16Array([10_000, -10_000]))), [32767, -32768, 5]);
  t.is(silence(20, 48_000).length, 960);
  t.deepEqual(Array.from(toMono(new Int16Array([10, 20, -4, 4]), 2)), [15, 0]);
  t.is(rms(silence(10, 16_000)), 0);
});
