/**
 * VADProcessor: turns input audio into voice activity, `vad-speech-started` and
 * `vad-speech-stopped`, the raw material of turn taking.
 *
 * A window counts as speech when the analyzer's confidence reaches `confidence` and its level
 * reaches `minVolume`. Speech must last `startMs` before it counts (a click is not speech) and
 * silence must last `stopMs` before speech is reported stopped: a short pause (200 ms), after which
 * the turn processor (processors/turns) decides whether the user's turn is over, keeps listening,
 * or was only a backchannel over the bot. The VAD itself starts and ends no turn and interrupts
 * nobody.
 */
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import { StreamResampler, rms } from '../../core/audio.ts';
import { frame, signal, type Direction, type Frame } from '../../core/frames.ts';
import { resolveOptions, type OptionsFor, type Resolved } from '../../core/options.ts';
import type { VADAnalyzer } from '../services.ts';

export const VAD_DEFAULTS = {
  /** Minimum speech confidence of a window, in [0, 1]. */
  confidence: 0.7,
  /** Speech this long (ms) starts a user turn. */
  startMs: 200,
  /**
   * Silence this long (ms) after speech is reported as `vad-speech-stopped`: the short pause after
   * which the turn analyzer decides (processors/turns). The old fixed rule, where this silence
   * alone ended the turn, was 800 ms.
   */
  stopMs: 200,
  /** Minimum RMS level in [0, 1] for a window to count as speech (ignores faint background). */
  minVolume: 0.01,
  /** Emit vad-confidence frames (telemetry, e.g. the widget's userSpeakingChanged). */
  emitConfidence: false,
} as const;

export interface VADOptions extends ProcessorOptions, OptionsFor<typeof VAD_DEFAULTS> {}

type VADState = 'quiet' | 'starting' | 'speaking' | 'stopping';

export class VADProcessor extends FrameProcessor {
  readonly settings: Resolved<typeof VAD_DEFAULTS>;
  private state: VADState = 'quiet';
  /** Milliseconds of consecutive speech (starting) or silence (stopping). */
  private runMs = 0;
  private readonly resampling = new StreamResampler(() => this.analyzer.sampleRate);
  private pending = new Int16Array(0);

  constructor(private readonly analyzer: VADAnalyzer, options: VADOptions = {}) {
    super(options);
    this.settings = resolveOptions(VAD_DEFAULTS, options);
  }

  /** Speech is on (started, and not yet followed by `stopMs` of silence). */
  get speaking(): boolean {
    return this.state === 'speaking' || this.state === 'stopping';
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'input-audio':
        this.push(f, direction);
        this.analyze(f.pcm, f.sampleRate, f.channels);
        return;
      case 'cancel':
      case 'end':
        this.analyzer.reset();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private analyze(pcm: Int16Array, sampleRate: number, channels: number): void {
    if (channels !== 1) return; // input transports deliver mono; anything else is ignored, not guessed at
    const mono = this.resampling.convert(pcm, sampleRate);
    const merged = new Int16Array(this.pending.length + mono.length);
    merged.set(this.pending);
    merged.set(mono, this.pending.length);
    const size = this.analyzer.windowSamples;
    const windowMs = (size / this.analyzer.sampleRate) * 1000;
    let offset = 0;
    for (; offset + size <= merged.length; offset += size) {
      const window = merged.subarray(offset, offset + size);
      const confidence = this.analyzer.confidence(window);
      if (this.settings.emitConfidence) this.push(frame('vad-confidence', { confidence }));
      const speech = confidence >= this.settings.confidence && rms(window) >= this.settings.minVolume;
      this.step(speech, windowMs);
    }
    this.pending = merged.slice(offset);
  }

  private step(speech: boolean, windowMs: number): void {
    switch (this.state) {
      case 'quiet':
        if (speech) {
          this.state = 'starting';
          this.runMs = windowMs;
          if (this.runMs >= this.settings.startMs) this.speechStarted();
        }
        return;
      case 'starting':
        if (!speech) {
          this.state = 'quiet';
          return;
        }
        this.runMs += windowMs;
        if (this.runMs >= this.settings.startMs) this.speechStarted();
        return;
      case 'speaking':
        if (!speech) {
          this.state = 'stopping';
          this.runMs = windowMs;
          if (this.runMs >= this.settings.stopMs) this.speechStopped();
        }
        return;
      case 'stopping':
        if (speech) {
          this.state = 'speaking';
          return;
        }
        this.runMs += windowMs;
        if (this.runMs >= this.settings.stopMs) this.speechStopped();
        return;
    }
  }

  private speechStarted(): void {
    this.state = 'speaking';
    this.push(signal('vad-speech-started'));
  }

  private speechStopped(): void {
    this.state = 'quiet';
    this.push(frame('vad-speech-stopped', { silenceMs: this.runMs }));
  }
}
