/**
 * Audio helpers for 16-bit PCM: conversions, fixed-duration chunking, mixing and a streaming
 * band-limited resampler (windowed sinc, Kaiser window), enough for every rate a voice pipeline
 * meets (8, 16, 22.05, 24, 44.1, 48 kHz) without aliasing.
 */

export function int16ToFloat32(pcm: Int16Array): Float32Array {
  const out = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) out[i] = pcm[i]! / 32768;
  return out;
}

export function float32ToInt16(samples: Float32Array): Int16Array {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const v = Math.round(samples[i]! * 32768);
    out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return out;
}

/** Interprets little-endian bytes as int16 samples (copies when unaligned). */
export function bytesToInt16(bytes: Uint8Array): Int16Array {
  const n = bytes.byteLength >> 1;
  if (bytes.byteOffset % 2 === 0) return new Int16Array(bytes.buffer, bytes.byteOffset, n);
  return new Int16Array(bytes.slice(0, n * 2).buffer);
}

export function int16ToBytes(pcm: Int16Array): Uint8Array {
  return new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
}

export function samplesFor(ms: number, sampleRate: number): number {
  return Math.round((ms * sampleRate) / 1000);
}

export function durationMs(samples: number, sampleRate: number, channels = 1): number {
  return (samples / channels / sampleRate) * 1000;
}

export function silence(ms: number, sampleRate: number, channels = 1): Int16Array {
  return new Int16Array(samplesFor(ms, sampleRate) * channels);
}

/** Root mean square level in [0, 1]. */
export function rms(pcm: Int16Array): number {
  if (pcm.length === 0) return 0;
  let sum = 0;
  for (let i = 0; i < pcm.length; i++) sum += pcm[i]! * pcm[i]!;
  return Math.sqrt(sum / pcm.length) / 32768;
}

/** Sums signals sample by sample with saturation; the result has the longest input's length. */
export function mix(...tracks: Int16Array[]): Int16Array {
  const length = Math.max(0, ...tracks.map((t) => t.length));
  const out = new Int16Array(length);
  for (let i = 0; i < length; i++) {
    let v = 0;
    for (const t of tracks) v += t[i] ?? 0;
    out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return out;
}

export function concat(parts: readonly Int16Array[]): Int16Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Int16Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Averages interleaved channels into mono. */
/**
 * A mono 16-bit PCM WAV file of `pcm` at `sampleRate` (the 44-byte RIFF header, then the
 * samples, little-endian): to write a bot's audio to disk, or feed a browser's fake microphone.
 */
export function encodeWav(pcm: Int16Array, sampleRate: number): Uint8Array {
  const out = new Uint8Array(44 + pcm.byteLength);
  const view = new DataView(out.buffer);
  const ascii = (at: number, text: string) => { for (let i = 0; i < text.length; i++) out[at + i] = text.charCodeAt(i); };
  ascii(0, 'RIFF');
  view.setUint32(4, 36 + pcm.byteLength, true);
  ascii(8, 'WAVEfmt ');
  view.setUint32(16, 16, true); // fmt chunk size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true); // byte rate
  view.setUint16(32, 2, true); // block align
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, 'data');
  view.setUint32(40, pcm.byteLength, true);
  for (let i = 0; i < pcm.length; i++) view.setInt16(44 + i * 2, pcm[i]!, true);
  return out;
}

export function toMono(pcm: Int16Array, channels: number): Int16Array {
  if (channels === 1) return pcm;
  const n = Math.floor(pcm.length / channels);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    let v = 0;
    for (let c = 0; c < channels; c++) v += pcm[i * channels + c]!;
    out[i] = Math.round(v / channels);
  }
  return out;
}

/** Splits PCM into chunks of `ms` (the last one may be shorter). */
export function* chunkAudio(pcm: Int16Array, sampleRate: number, ms: number, channels = 1): Generator<Int16Array> {
  const size = samplesFor(ms, sampleRate) * channels;
  for (let i = 0; i < pcm.length; i += size) yield pcm.subarray(i, Math.min(pcm.length, i + size));
}

/**
 * Streaming re-chunker: accepts PCM of any length and hands out chunks of exactly `ms`
 * (the remainder waits for more input, or `flush()` pads it with silence).
 */
export class AudioChunker {
  readonly chunkSamples: number;
  private buffer: Int16Array;
  private filled = 0;

  constructor(readonly sampleRate: number, readonly ms: number, readonly channels = 1) {
    this.chunkSamples = samplesFor(ms, sampleRate) * channels;
    this.buffer = new Int16Array(this.chunkSamples);
  }

  get pendingSamples(): number {
    return this.filled;
  }

  push(pcm: Int16Array): Int16Array[] {
    const out: Int16Array[] = [];
    let i = 0;
    while (i < pcm.length) {
      const take = Math.min(this.chunkSamples - this.filled, pcm.length - i);
      this.buffer.set(pcm.subarray(i, i + take), this.filled);
      this.filled += take;
      i += take;
      if (this.filled === this.chunkSamples) {
        out.push(this.buffer);
        this.buffer = new Int16Array(this.chunkSamples);
        this.filled = 0;
      }
    }
    return out;
  }

  /** The pending remainder padded with silence to a full chunk, or nothing. */
  flush(): Int16Array | undefined {
    if (this.filled === 0) return undefined;
    const out = this.buffer;
    this.buffer = new Int16Array(this.chunkSamples);
    this.filled = 0;
    return out;
  }

  clear(): void {
    this.filled = 0;
  }
}

// ---- resampling -------------------------------------------------------------------------------

export const RESAMPLER_DEFAULTS = {
  /** Zero crossings of the sinc kernel on each side: more = sharper filter, more work. */
  zeroCrossings: 16,
  /** Cutoff as a fraction of the lower Nyquist frequency (leaves room for the transition band). */
  rolloff: 0.92,
  /** Kaiser window shape (beta). */
  kaiserBeta: 8.6,
  /** Kernel table resolution: entries per input sample. */
  tableResolution: 512,
} as const;

function besselI0(x: number): number {
  let sum = 1;
  let term = 1;
  for (let k = 1; k < 50; k++) {
    term *= (x / (2 * k)) ** 2;
    sum += term;
    if (term < 1e-12 * sum) break;
  }
  return sum;
}

const kernelCache = new Map<string, { table: Float32Array; halfWidth: number; scale: number }>();

function kernelFor(ratio: number) {
  const key = ratio.toFixed(9);
  const cached = kernelCache.get(key);
  if (cached) return cached;
  const { zeroCrossings, rolloff, kaiserBeta, tableResolution } = RESAMPLER_DEFAULTS;
  const scale = Math.min(1, ratio);
  const cutoff = 0.5 * rolloff * scale; // cycles per input sample
  const halfWidth = Math.ceil(zeroCrossings / scale); // input samples each side
  const n = halfWidth * tableResolution + 2;
  const table = new Float32Array(n);
  const i0b = besselI0(kaiserBeta);
  for (let i = 0; i < n; i++) {
    const x = i / tableResolution;
    const r = x / halfWidth;
    const window = r >= 1 ? 0 : besselI0(kaiserBeta * Math.sqrt(1 - r * r)) / i0b;
    const arg = 2 * cutoff * x;
    const sinc = x === 0 ? 1 : Math.sin(Math.PI * arg) / (Math.PI * arg);
    table[i] = 2 * cutoff * sinc * window;
  }
  const kernel = { table, halfWidth, scale };
  kernelCache.set(key, kernel);
  return kernel;
}

/** Rates whose ratio reduces to at most this many output phases get precomputed tap weights. */
const MAX_PHASE_WEIGHTS = 1 << 18;

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

interface PolyphaseWeights {
  /** toRate / fromRate = l / m, reduced. */
  readonly l: number;
  readonly m: number;
  /** Taps per output sample (2 x halfWidth). */
  readonly taps: number;
  /** `taps` weights per phase, phase after phase. */
  readonly weights: Float64Array;
}

const polyphaseCache = new Map<string, PolyphaseWeights | null>();

/**
 * Polyphase weights for integer rates: with toRate/fromRate = l/m reduced, output n lies at input
 * position n*m/l, whose fractional part is one of l phases; each phase's 2*halfWidth tap weights
 * are the kernel table's (interpolated as the general path does), computed once per rate pair and
 * process (a stream per TTS request would otherwise redo 22.05 -> 16 kHz's 15k weights). Per
 * output sample the inner loop is then one multiply-add per tap instead of a table lookup and an
 * interpolation: measured 1.3-2x faster for 48 <-> 16 kHz, the WebRTC edges of every session.
 * Null when the rates are not integers or the phases would take too many weights.
 */
function polyphaseFor(fromRate: number, toRate: number, kernel: ReturnType<typeof kernelFor>): PolyphaseWeights | null {
  const key = `${fromRate}>${toRate}`;
  const cached = polyphaseCache.get(key);
  if (cached !== undefined) return cached;
  const weights = computePolyphase(fromRate, toRate, kernel);
  polyphaseCache.set(key, weights);
  return weights;
}

function computePolyphase(fromRate: number, toRate: number, kernel: ReturnType<typeof kernelFor>): PolyphaseWeights | null {
  if (!Number.isInteger(fromRate) || !Number.isInteger(toRate)) return null;
  const g = gcd(fromRate, toRate);
  const l = toRate / g;
  const m = fromRate / g;
  const { table, halfWidth } = kernel;
  const taps = 2 * halfWidth;
  if (l * taps > MAX_PHASE_WEIGHTS) return null;
  const res = RESAMPLER_DEFAULTS.tableResolution;
  const weights = new Float64Array(l * taps);
  for (let p = 0; p < l; p++) {
    for (let j = 0; j < taps; j++) {
      // Tap j of the window ending at floor(t) + halfWidth, with t = floor(t) + p/l.
      const x = Math.abs(halfWidth - 1 - j + p / l) * res;
      const i = x | 0;
      const frac = x - i;
      weights[p * taps + j] = table[i]! + (table[i + 1]! - table[i]!) * frac;
    }
  }
  return { l, m, taps, weights };
}

/**
 * Streaming mono resampler. Feed chunks with `process`, call `flush` at the end of a stream;
 * the output length converges to input length x toRate / fromRate. Stateful: one per stream.
 */
/**
 * One audio stream's conversion to `toRate`, the one way processors and transports resample a
 * stream: input already at that rate passes through untouched; other input goes through one
 * `Resampler` for its rate pair, kept (it holds the stream's filter state between chunks) and made
 * again only when the input's rate (or the target, read per chunk) changes.
 */
export class StreamResampler {
  private resampler: Resampler | undefined;

  constructor(private readonly toRate: number | (() => number)) {}

  convert(pcm: Int16Array, fromRate: number): Int16Array {
    const to = typeof this.toRate === 'number' ? this.toRate : this.toRate();
    if (fromRate === to) return pcm;
    if (!this.resampler || this.resampler.fromRate !== fromRate || this.resampler.toRate !== to) this.resampler = new Resampler(fromRate, to);
    return this.resampler.process(pcm);
  }

  /** What the resampler still holds (the stream ended), and a fresh start after it. */
  flush(): Int16Array {
    const resampler = this.resampler;
    this.resampler = undefined;
    return resampler ? resampler.flush() : new Int16Array(0);
  }

  /** Drops what the resampler holds (the stream was cut: an interruption, another speaker). */
  reset(): void {
    this.resampler = undefined;
  }
}

export class Resampler {
  private readonly step: number;
  private readonly kernel: ReturnType<typeof kernelFor>;
  private readonly phases: PolyphaseWeights | null;
  private buffer: Float32Array;
  private length: number;
  /** Input samples dropped from the front of `buffer` so far (excluding the initial padding). */
  private dropped = 0;
  private produced = 0;
  /**
   * One call's outputs before they are rounded to 16 bits, kept between calls: a growing `number[]`
   * per call was 46 % of everything a runner's main thread allocated with three live sessions
   * (the frame pump's 16 -> 48 kHz, 1,920 outputs per face frame), and its garbage what made
   * the young generation collect.
   */
  private scratch = new Float64Array(0);
  private outputs = 0;

  constructor(readonly fromRate: number, readonly toRate: number) {
    if (!(fromRate > 0 && toRate > 0)) throw new RangeError(`invalid sample rates ${fromRate} -> ${toRate}`);
    this.step = fromRate / toRate;
    this.kernel = kernelFor(toRate / fromRate);
    this.phases = polyphaseFor(fromRate, toRate, this.kernel);
    // Leading zeros stand for the silence before the stream, so the first outputs are defined.
    this.buffer = new Float32Array(4096 + this.kernel.halfWidth);
    this.length = this.kernel.halfWidth;
  }

  process(input: Int16Array): Int16Array {
    if (this.fromRate === this.toRate) return input.slice();
    this.append(input);
    return this.emit(false);
  }

  /** Emits what is left, treating the future as silence. */
  flush(): Int16Array {
    if (this.fromRate === this.toRate) return new Int16Array(0);
    this.append(new Int16Array(this.kernel.halfWidth + 1));
    const out = this.emit(true);
    return out;
  }

  private append(input: Int16Array): void {
    if (this.length + input.length > this.buffer.length) {
      const next = new Float32Array(Math.max(this.buffer.length * 2, this.length + input.length));
      next.set(this.buffer.subarray(0, this.length));
      this.buffer = next;
    }
    for (let i = 0; i < input.length; i++) this.buffer[this.length + i] = input[i]! / 32768;
    this.length += input.length;
  }

  private emit(final: boolean): Int16Array {
    const { halfWidth } = this.kernel;
    const pad = halfWidth;
    const buf = this.buffer;
    // At most one output per `step` input samples held, plus one (and one to spare): the scratch
    // never needs to grow inside the producing loops, which write it without a bounds check.
    const most = Math.ceil(this.length / this.step) + 2;
    if (this.scratch.length < most) this.scratch = new Float64Array(Math.max(most, this.scratch.length * 2));
    this.outputs = 0;
    // Sample positions are computed from counters (not accumulated) so long streams never drift.
    const totalInput = this.dropped + this.length - pad - (final ? halfWidth + 1 : 0);
    if (this.phases) this.producePolyphase(this.phases, final, totalInput);
    else this.produceInterpolated(final, totalInput);
    const out = this.scratch;
    // Keep only the history the next output still needs.
    const nextT = this.produced * this.step - this.dropped + pad;
    const keepFrom = Math.max(0, Math.floor(nextT - halfWidth) - 1);
    if (keepFrom > 0) {
      buf.copyWithin(0, keepFrom, this.length);
      this.length -= keepFrom;
      this.dropped += keepFrom;
    }
    const pcm = new Int16Array(this.outputs);
    for (let i = 0; i < pcm.length; i++) {
      const v = Math.round(out[i]! * 32768);
      pcm[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
    }
    return pcm;
  }

  /** Rational ratio: output n sits at input n*m/l exactly, its taps' weights precomputed per phase. */
  private producePolyphase({ l, m, taps, weights }: PolyphaseWeights, final: boolean, totalInput: number): void {
    const buf = this.buffer;
    const out = this.scratch;
    const offset = this.kernel.halfWidth * 2 - this.dropped; // pad + halfWidth - dropped
    for (;;) {
      const num = this.produced * m;
      if (final && num >= totalInput * l) return;
      const phase = num % l;
      const last = (num - phase) / l + offset;
      if (last >= this.length) return;
      let acc = 0;
      let w = phase * taps;
      for (let k = last - taps + 1; k <= last; k++) acc += buf[k]! * weights[w++]!;
      out[this.outputs++] = acc;
      this.produced++;
    }
  }

  /** Any ratio: each tap's weight interpolated from the kernel table at its distance. */
  private produceInterpolated(final: boolean, totalInput: number): void {
    const { table, halfWidth } = this.kernel;
    const out = this.scratch;
    const res = RESAMPLER_DEFAULTS.tableResolution;
    const buf = this.buffer;
    for (;;) {
      const tAbs = this.produced * this.step;
      if (final && tAbs >= totalInput) return;
      const t = tAbs - this.dropped + halfWidth; // position inside buffer (after the padding)
      const last = Math.floor(t + halfWidth);
      if (last >= this.length) return;
      const first = Math.max(0, Math.ceil(t - halfWidth));
      let acc = 0;
      for (let k = first; k <= last; k++) {
        const x = Math.abs(t - k) * res;
        const i = x | 0;
        const frac = x - i;
        acc += buf[k]! * (table[i]! + (table[i + 1]! - table[i]!) * frac);
      }
      out[this.outputs++] = acc;
      this.produced++;
    }
  }
}

/** One-shot resampling of a whole signal. */
export function resample(pcm: Int16Array, fromRate: number, toRate: number): Int16Array {
  if (fromRate === toRate) return pcm.slice();
  const r = new Resampler(fromRate, toRate);
  return concat([r.process(pcm), r.flush()]);
}
