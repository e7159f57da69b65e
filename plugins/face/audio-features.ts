/**
 * Spectral features of speech for the mouth, streaming: one set every 10 ms (a 16 ms Hann
 * window, 256-point FFT at 16 kHz), enough to tell the mouth's sound classes apart without a
 * recogniser: loudness, voicing (zero crossings), and the energy in five bands that separate
 * nasal murmur (everything below 350 Hz), rounded vowels (low formants: little above 1 kHz),
 * front vowels (a strong second formant at 2-3 kHz) and fricatives (above 4 kHz).
 * About 5 microseconds per 10 ms hop.
 */

export const FEATURE_HOP = 160;
const WINDOW = 256;
/** Band edges in Hz: [80-350) [350-1000) [1000-2200) [2200-4000) [4000-8000). */
const BAND_EDGES_HZ = [80, 350, 1000, 2200, 4000, 8000] as const;
export const BANDS = BAND_EDGES_HZ.length - 1;

export interface HopFeatures {
  /** Loudness, dB relative to full scale. */
  db: number;
  /** Zero-crossing rate, crossings per sample. */
  zcr: number;
  /** Energy share of each band (sums to 1 when there is energy). */
  bands: Float32Array;
  /** Spectral centroid (Hz) of 250-3000 Hz: low for rounded vowels, high for front vowels. */
  centroid: number;
  /**
   * First and second formant estimates (Hz): the strongest peak of the spectrum smoothed over
   * 5 bins (312 Hz, wider than the harmonics' spacing) in 200-900 Hz, and above it (at least
   * 250 Hz higher, from 700 Hz) up to 3 kHz. Rough, but enough for vowel height and backness.
   */
  f1: number;
  f2: number;
}

const hann = Float64Array.from({ length: WINDOW }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * (i + 0.5)) / WINDOW));
const binHz = 16_000 / WINDOW;
const bandOfBin = Int8Array.from({ length: WINDOW / 2 }, (_, k) => {
  const hz = k * binHz;
  for (let b = 0; b < BANDS; b++) if (hz >= BAND_EDGES_HZ[b]! && hz < BAND_EDGES_HZ[b + 1]!) return b;
  return -1;
});
const re = new Float64Array(WINDOW), im = new Float64Array(WINDOW), power = new Float64Array(WINDOW / 2);

/** The bin of the largest 5-bin mean of `power` with its centre in [fromHz, toHz]. */
function peakBin(fromHz: number, toHz: number): number {
  let best = -1, at = Math.round(fromHz / binHz);
  for (let k = Math.max(3, Math.round(fromHz / binHz)); k <= Math.min(WINDOW / 2 - 3, Math.round(toHz / binHz)); k++) {
    const s = power[k - 2]! + power[k - 1]! + power[k]! + power[k + 1]! + power[k + 2]!;
    if (s > best) { best = s; at = k; }
  }
  return at;
}
const twiddle = Array.from({ length: Math.log2(WINDOW) }, (_, s) => {
  const size = 2 << s, half = size >> 1;
  return { cos: Float64Array.from({ length: half }, (_, k) => Math.cos((-2 * Math.PI * k) / size)), sin: Float64Array.from({ length: half }, (_, k) => Math.sin((-2 * Math.PI * k) / size)) };
});

function fft(): void {
  const n = WINDOW;
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) { const t = re[i]!; re[i] = re[j]!; re[j] = t; }
  }
  for (let s = 0, size = 2; size <= n; s++, size <<= 1) {
    const half = size >> 1, { cos, sin } = twiddle[s]!;
    for (let start = 0; start < n; start += size) {
      for (let k = 0; k < half; k++) {
        const a = start + k, b = a + half;
        const tr = re[b]! * cos[k]! - im[b]! * sin[k]!, ti = re[b]! * sin[k]! + im[b]! * cos[k]!;
        re[b] = re[a]! - tr; im[b] = im[a]! - ti;
        re[a] = re[a]! + tr; im[a] = im[a]! + ti;
      }
    }
  }
}

/** Features of the 256 samples of `pcm` from `at` (zero beyond its end). */
export function hopFeatures(pcm: Int16Array, at: number, out?: HopFeatures): HopFeatures {
  const f = out ?? { db: -120, zcr: 0, bands: new Float32Array(BANDS), centroid: 0, f1: 0, f2: 0 };
  let sum = 0, crossings = 0, prev = 0;
  for (let i = 0; i < WINDOW; i++) {
    const s = at + i >= 0 && at + i < pcm.length ? pcm[at + i]! / 32768 : 0;
    sum += s * s;
    if (i > 0 && (s >= 0) !== (prev >= 0)) crossings++;
    prev = s;
    re[i] = s * hann[i]!;
    im[i] = 0;
  }
  f.db = 10 * Math.log10(sum / WINDOW + 1e-12);
  f.zcr = crossings / WINDOW;
  fft();
  f.bands.fill(0);
  let total = 0, cNum = 0, cDen = 0;
  for (let k = 1; k < WINDOW / 2; k++) power[k] = re[k]! * re[k]! + im[k]! * im[k]!;
  for (let k = 1; k < WINDOW / 2; k++) {
    const p = power[k]!;
    const b = bandOfBin[k]!;
    if (b >= 0) { f.bands[b] = f.bands[b]! + p; total += p; }
    const hz = k * binHz;
    if (hz >= 250 && hz < 3000) { cNum += p * hz; cDen += p; }
  }
  if (total > 0) for (let b = 0; b < BANDS; b++) f.bands[b] = f.bands[b]! / total;
  f.centroid = cDen > 0 ? cNum / cDen : 0;
  const k1 = peakBin(200, 900);
  f.f1 = k1 * binHz;
  f.f2 = peakBin(Math.max(700, f.f1 + 250), 3000) * binHz;
  return f;
}
