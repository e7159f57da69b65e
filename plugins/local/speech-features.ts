/**
 * Acoustic features for the phrase recogniser: MFCCs (25 ms frames every 10 ms, 24 mel bands,
 * cepstra 1-12) with per-utterance cepstral mean normalisation, which removes the loudness and
 * channel colour so a quieter or resampled copy of a phrase still matches. Classic isolated-word
 * recognition front end; 16 kHz input.
 */

export const FEATURE_SAMPLE_RATE = 16000;

const FRAME_SAMPLES = 400;
const HOP_SAMPLES = 160;
const FFT_SIZE = 512;
const MEL_BANDS = 24;
const CEPSTRA = 12;
const MIN_HZ = 100;
const MAX_HZ = 7600;

/** Milliseconds between feature frames. */
export const FEATURE_HOP_MS = (HOP_SAMPLES / FEATURE_SAMPLE_RATE) * 1000;

const hamming = Float64Array.from({ length: FRAME_SAMPLES }, (_, i) => 0.54 - 0.46 * Math.cos((2 * Math.PI * i) / (FRAME_SAMPLES - 1)));

const melOf = (hz: number) => 2595 * Math.log10(1 + hz / 700);
const hzOf = (mel: number) => 700 * (10 ** (mel / 2595) - 1);

/** Triangular mel filters over the FFT bins. */
const melFilters: Array<{ from: number; weights: Float64Array }> = (() => {
  const points = Array.from({ length: MEL_BANDS + 2 }, (_, i) => hzOf(melOf(MIN_HZ) + ((melOf(MAX_HZ) - melOf(MIN_HZ)) * i) / (MEL_BANDS + 1)));
  const bin = (hz: number) => (hz * FFT_SIZE) / FEATURE_SAMPLE_RATE;
  return Array.from({ length: MEL_BANDS }, (_, b) => {
    const [lo, mid, hi] = [bin(points[b]!), bin(points[b + 1]!), bin(points[b + 2]!)];
    const from = Math.floor(lo);
    const weights = new Float64Array(Math.ceil(hi) - from + 1);
    for (let k = 0; k < weights.length; k++) {
      const f = from + k;
      weights[k] = f <= lo || f >= hi ? 0 : f <= mid ? (f - lo) / (mid - lo) : (hi - f) / (hi - mid);
    }
    return { from, weights };
  });
})();

const dct = Array.from({ length: CEPSTRA }, (_, c) =>
  Float64Array.from({ length: MEL_BANDS }, (_, b) => Math.cos((Math.PI * (c + 1) * (b + 0.5)) / MEL_BANDS)),
);

/** In-place iterative radix-2 FFT. */
function fft(re: Float64Array, im: Float64Array): void {
  const n = re.length;
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      [re[i], re[j]] = [re[j]!, re[i]!];
      [im[i], im[j]] = [im[j]!, im[i]!];
    }
  }
  for (let size = 2; size <= n; size <<= 1) {
    const angle = (-2 * Math.PI) / size;
    for (let start = 0; start < n; start += size) {
      for (let k = 0; k < size / 2; k++) {
        const wr = Math.cos(angle * k);
        const wi = Math.sin(angle * k);
        const a = start + k;
        const b = a + size / 2;
        const tr = re[b]! * wr - im[b]! * wi;
        const ti = re[b]! * wi + im[b]! * wr;
        re[b] = re[a]! - tr;
        im[b] = im[a]! - ti;
        re[a] = re[a]! + tr;
        im[a] = im[a]! + ti;
      }
    }
  }
}

/** MFCC frames (cepstra 1-12, mean-normalised) of 16 kHz mono PCM. */
export function mfcc(pcm: Int16Array): Float32Array[] {
  const frames: Float32Array[] = [];
  const re = new Float64Array(FFT_SIZE);
  const im = new Float64Array(FFT_SIZE);
  const power = new Float64Array(FFT_SIZE / 2 + 1);
  const logMel = new Float64Array(MEL_BANDS);
  for (let start = 0; start + FRAME_SAMPLES <= pcm.length; start += HOP_SAMPLES) {
    re.fill(0);
    im.fill(0);
    for (let i = 0; i < FRAME_SAMPLES; i++) re[i] = (pcm[start + i]! / 32768) * hamming[i]!;
    fft(re, im);
    for (let k = 0; k < power.length; k++) power[k] = re[k]! ** 2 + im[k]! ** 2;
    melFilters.forEach(({ from, weights }, b) => {
      let e = 0;
      for (let k = 0; k < weights.length; k++) e += (power[from + k] ?? 0) * weights[k]!;
      logMel[b] = Math.log(e + 1e-10);
    });
    frames.push(Float32Array.from(dct, (row) => row.reduce((sum, w, b) => sum + w * logMel[b]!, 0)));
  }
  const mean = new Float64Array(CEPSTRA);
  for (const f of frames) f.forEach((v, c) => (mean[c]! += v / frames.length));
  for (const f of frames) for (let c = 0; c < CEPSTRA; c++) f[c]! -= mean[c]!;
  return frames;
}

/**
 * Cuts leading and trailing quiet (frames 35 dB under the loudest 10 ms, or under -70 dBFS)
 * so templates and utterances are compared from the first sound to the last.
 */
export function trimSilence(pcm: Int16Array): Int16Array {
  const levels: number[] = [];
  for (let i = 0; i + HOP_SAMPLES <= pcm.length; i += HOP_SAMPLES) {
    let sum = 0;
    for (let k = i; k < i + HOP_SAMPLES; k++) sum += pcm[k]! ** 2;
    levels.push(10 * Math.log10(sum / HOP_SAMPLES / 32768 ** 2 + 1e-12));
  }
  const floor = Math.max(-70, Math.max(...levels) - 35);
  const first = levels.findIndex((l) => l > floor);
  if (first < 0) return pcm.subarray(0, 0);
  const last = levels.length - 1 - [...levels].reverse().findIndex((l) => l > floor);
  return pcm.subarray(first * HOP_SAMPLES, Math.min(pcm.length, (last + 1) * HOP_SAMPLES + FRAME_SAMPLES));
}

/**
 * Dynamic time warping distance between two feature sequences: mean Euclidean frame distance
 * along the best alignment, within a band of 30% of the longer length (plus the length
 * difference), so speaking a little faster or slower still matches.
 */
export function dtwDistance(a: readonly Float32Array[], b: readonly Float32Array[]): number {
  const n = a.length;
  const m = b.length;
  // More than twice as long or short: not the same phrase, whatever the alignment says.
  if (n === 0 || m === 0 || n > 2 * m || m > 2 * n) return Infinity;
  const band = Math.max(Math.abs(n - m), Math.ceil(0.3 * Math.max(n, m)));
  let previous = new Float64Array(m + 1).fill(Infinity);
  let current = new Float64Array(m + 1).fill(Infinity);
  let previousSteps = new Uint32Array(m + 1);
  let currentSteps = new Uint32Array(m + 1);
  previous[0] = 0;
  for (let i = 1; i <= n; i++) {
    current.fill(Infinity);
    const centre = Math.round((i * m) / n);
    for (let j = Math.max(1, centre - band); j <= Math.min(m, centre + band); j++) {
      const fa = a[i - 1]!;
      const fb = b[j - 1]!;
      let d = 0;
      for (let c = 0; c < fa.length; c++) d += (fa[c]! - fb[c]!) ** 2;
      // Diagonal, vertical, horizontal predecessors; ties prefer the diagonal.
      let best = previous[j - 1]!;
      let steps = previousSteps[j - 1]!;
      if (previous[j]! < best) {
        best = previous[j]!;
        steps = previousSteps[j]!;
      }
      if (current[j - 1]! < best) {
        best = current[j - 1]!;
        steps = currentSteps[j - 1]!;
      }
      current[j] = best + Math.sqrt(d);
      currentSteps[j] = steps + 1;
    }
    [previous, current] = [current, previous];
    [previousSteps, currentSteps] = [currentSteps, previousSteps];
  }
  return previous[m]! / Math.max(1, previousSteps[m]!);
}
