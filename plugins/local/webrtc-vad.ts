/**
 * `vad:local`: the WebRTC voice activity detector (libfvad, wasm). WebRTC VAD answers speech /
 * not speech per 10, 20 or 30 ms window; the pipeline wants a confidence, so the binary decisions
 * are smoothed with an asymmetric moving average: it rises quickly when speech starts (attack)
 * and falls more slowly (release), which bridges the short non-speech windows inside words.
 * With the defaults, two speech windows in a row give 0.84 and four silent windows after long
 * speech bring it under 0.35.
 */
import initFvad, { type FvadModule } from '@echogarden/fvad-wasm';
import { resolveOptions } from '../../core/options.ts';
import type { VADAnalyzer } from '../../processors/services.ts';
import { LocalEngineError } from './local-engine-error.ts';

export const WEBRTC_VAD_DEFAULTS = {
  /** 8000, 16000, 32000 or 48000 Hz (the rates libfvad accepts). */
  sampleRate: 16000,
  /** 10, 20 or 30 ms analysis windows. */
  windowMs: 20,
  /** libfvad aggressiveness 0-3: higher rejects more noise and also more quiet speech. */
  mode: 3,
  /**
   * libfvad calls the first ~80 ms after a reset speech whatever the input (its noise model
   * starts from a default); decisions during this warm-up count as non-speech.
   */
  warmUpMs: 80,
  /** Share of the gap to 1 closed by each speech window. */
  attack: 0.6,
  /** Share of the gap to 0 closed by each non-speech window. */
  release: 0.25,
} as const;

export interface WebRtcVADOptions {
  readonly sampleRate?: number;
  readonly windowMs?: number;
  readonly mode?: number;
  readonly attack?: number;
  readonly release?: number;
  readonly warmUpMs?: number;
}

// The module is 20 kB of wasm: loading it once at import keeps `confidence` synchronous.
const fvad: FvadModule = await initFvad();

const SAMPLE_RATES = [8000, 16000, 32000, 48000];
const WINDOWS_MS = [10, 20, 30];

const finalizer = new FinalizationRegistry<{ instance: number; buffer: number }>(({ instance, buffer }) => {
  fvad._fvad_free(instance);
  fvad._free(buffer);
});

export class WebRtcVADAnalyzer implements VADAnalyzer {
  readonly sampleRate: number;
  readonly windowSamples: number;
  readonly mode: number;
  private readonly attack: number;
  private readonly release: number;
  private readonly instance: number;
  private readonly buffer: number;
  private readonly warmUpWindows: number;
  private windowsSinceReset = 0;
  private smoothed = 0;

  constructor(options: WebRtcVADOptions = {}) {
    // An option passed as undefined keeps its default.
    const o = resolveOptions(WEBRTC_VAD_DEFAULTS, options);
    if (!SAMPLE_RATES.includes(o.sampleRate)) {
      throw new LocalEngineError('unsupported_sample_rate', `WebRTC VAD works at ${SAMPLE_RATES.join(', ')} Hz, not ${o.sampleRate}`);
    }
    if (!WINDOWS_MS.includes(o.windowMs)) throw new LocalEngineError('invalid_options', `windowMs must be 10, 20 or 30, got ${o.windowMs}`);
    if (![0, 1, 2, 3].includes(o.mode)) throw new LocalEngineError('invalid_options', `mode must be 0, 1, 2 or 3, got ${o.mode}`);
    for (const key of ['attack', 'release'] as const) {
      if (!(o[key] > 0 && o[key] <= 1)) throw new LocalEngineError('invalid_options', `${key} must be within (0, 1], got ${o[key]}`);
    }
    if (!(o.warmUpMs >= 0)) throw new LocalEngineError('invalid_options', `warmUpMs must be >= 0, got ${o.warmUpMs}`);
    this.warmUpWindows = Math.ceil(o.warmUpMs / o.windowMs);
    this.sampleRate = o.sampleRate;
    this.windowSamples = (o.sampleRate * o.windowMs) / 1000;
    this.mode = o.mode;
    this.attack = o.attack;
    this.release = o.release;
    this.instance = fvad._fvad_new();
    this.buffer = fvad._malloc(this.windowSamples * 2);
    if (!this.instance || !this.buffer) throw new LocalEngineError('engine_failure', 'libfvad could not allocate a detector');
    fvad._fvad_set_sample_rate(this.instance, this.sampleRate);
    fvad._fvad_set_mode(this.instance, this.mode);
    finalizer.register(this, { instance: this.instance, buffer: this.buffer });
  }

  /** The raw libfvad decision for one window (true = speech). */
  isSpeech(window: Int16Array): boolean {
    if (window.length !== this.windowSamples) {
      throw new LocalEngineError('invalid_options', `a VAD window is ${this.windowSamples} samples, got ${window.length}`);
    }
    // HEAP16 is re-read every call: the view is replaced whenever wasm memory grows.
    fvad.HEAP16.set(window, this.buffer >> 1);
    const result = fvad._fvad_process(this.instance, this.buffer, this.windowSamples);
    if (result < 0) throw new LocalEngineError('engine_failure', 'libfvad rejected the window');
    return result === 1;
  }

  confidence(window: Int16Array): number {
    const speech = this.isSpeech(window);
    const warmingUp = this.windowsSinceReset++ < this.warmUpWindows;
    const target = speech && !warmingUp ? 1 : 0;
    this.smoothed += (target === 1 ? this.attack : this.release) * (target - this.smoothed);
    return this.smoothed;
  }

  reset(): void {
    fvad._fvad_reset(this.instance);
    // fvad_reset also resets the mode to 0 and the rate to 8 kHz.
    fvad._fvad_set_sample_rate(this.instance, this.sampleRate);
    fvad._fvad_set_mode(this.instance, this.mode);
    this.smoothed = 0;
    this.windowsSinceReset = 0;
  }
}
