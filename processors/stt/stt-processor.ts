/**
 * STTProcessor: streams input audio to a speech-to-text service and turns its results into
 * transcription frames (interim and final), in the agent's language.
 *
 * Connections drop. Audio sent since the last final transcript is kept (bounded), so after a
 * drop the processor reconnects with exponential backoff and replays it: the words the user said
 * while the provider was away are not lost. When reconnecting fails for good, a clear error
 * frame goes upstream and audio keeps being dropped rather than crashing anything.
 */
import type { Subscription } from 'rxjs';
import { Resampler, concat } from '../../core/audio.ts';
import { isAbortError } from '../../core/clock.ts';
import { frame, type Direction, type Frame } from '../../core/frames.ts';
import { ProcessorMetrics } from '../../core/metrics.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { STTService, STTStream, TranscriptEvent } from '../services.ts';

export const STT_DEFAULTS = {
  /** Language code when the agent sets none. */
  language: 'en',
  /** Ask the provider for interim hypotheses. */
  interimResults: true,
  /** First reconnect delay; doubles on each failed attempt. */
  reconnectBaseMs: 250,
  /** Longest wait between reconnect attempts. */
  reconnectMaxMs: 4_000,
  /** Attempts before giving up and reporting an error. */
  reconnectAttempts: 6,
  /** Audio kept for replay after a drop (ms). Older audio cannot be replayed. */
  replayBufferMs: 15_000,
  /** Sample rate sent to the provider; undefined = the pipeline's input rate. */
  sampleRate: undefined as number | undefined,
} as const;

export interface STTOptions extends ProcessorOptions {
  language?: string;
  interimResults?: boolean;
  reconnectBaseMs?: number;
  reconnectMaxMs?: number;
  reconnectAttempts?: number;
  replayBufferMs?: number;
  sampleRate?: number;
  model?: string;
}

export class STTProcessor extends FrameProcessor {
  private readonly settings: Required<Omit<STTOptions, 'name' | 'sampleRate' | 'model'>> & { sampleRate?: number; model?: string };
  private stream: STTStream | undefined;
  private subscription: Subscription | undefined;
  private resampler: Resampler | undefined;
  private replay: Int16Array[] = [];
  private replaySamples = 0;
  private rate = 16_000;
  private reconnecting: Promise<void> | undefined;
  private closed = false;
  private failed = false;
  private readonly metrics = ProcessorMetrics.for(this.name, () => this.clock, (f) => this.push(f), () => this.startFrame?.enableMetrics ?? false);
  /** Reconnections performed (diagnostics, tests). */
  reconnects = 0;

  constructor(private readonly service: STTService, options: STTOptions = {}) {
    super(options);
    this.settings = {
      language: options.language ?? STT_DEFAULTS.language,
      interimResults: options.interimResults ?? STT_DEFAULTS.interimResults,
      reconnectBaseMs: options.reconnectBaseMs ?? STT_DEFAULTS.reconnectBaseMs,
      reconnectMaxMs: options.reconnectMaxMs ?? STT_DEFAULTS.reconnectMaxMs,
      reconnectAttempts: options.reconnectAttempts ?? STT_DEFAULTS.reconnectAttempts,
      replayBufferMs: options.replayBufferMs ?? STT_DEFAULTS.replayBufferMs,
      sampleRate: options.sampleRate,
      model: options.model,
    };
  }

  protected override async onStart(start: Frame & { type: 'start' }): Promise<void> {
    this.rate = this.settings.sampleRate ?? start.audioInSampleRate;
    try {
      await this.connect();
      // Audio that arrived while the first connection was opening is sent now, not lost.
      const early = concat(this.replay);
      if (early.length) this.stream?.sendAudio(early);
    } catch (err) {
      this.onDrop(err);
    }
  }

  protected override async onEnd(): Promise<void> {
    await this.close();
  }

  protected override onCancel(): void {
    void this.close();
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'input-audio':
        this.sendAudio(f.pcm, f.sampleRate);
        break;
      case 'user-stopped-speaking':
        if (direction === 'downstream') {
          this.metrics.startTtfb();
          this.stream?.finalize();
        }
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private sendAudio(pcm: Int16Array, sampleRate: number): void {
    let audio = pcm;
    if (sampleRate !== this.rate) {
      if (!this.resampler || this.resampler.fromRate !== sampleRate) this.resampler = new Resampler(sampleRate, this.rate);
      audio = this.resampler.process(pcm);
    }
    this.remember(audio);
    if (this.stream && !this.reconnecting) this.stream.sendAudio(audio);
  }

  private remember(audio: Int16Array): void {
    this.replay.push(audio);
    this.replaySamples += audio.length;
    const max = (this.settings.replayBufferMs / 1000) * this.rate;
    while (this.replaySamples > max && this.replay.length > 1) this.replaySamples -= this.replay.shift()!.length;
  }

  private async connect(): Promise<void> {
    const stream = await this.service.connect({
      language: this.settings.language,
      sampleRate: this.rate,
      channels: 1,
      interimResults: this.settings.interimResults,
      model: this.settings.model,
    });
    this.stream = stream;
    this.subscription = stream.transcripts.subscribe({
      next: (e) => this.onTranscript(e),
      error: (err) => this.onDrop(err),
      complete: () => {
        if (!this.closed) this.onDrop(new Error('connection closed by the provider'));
      },
    });
  }

  private onTranscript(e: TranscriptEvent): void {
    if (!e.text.trim()) return;
    if (e.final) {
      this.metrics.stopTtfb();
      // A final result covers everything sent so far: nothing older needs replaying.
      this.replay = [];
      this.replaySamples = 0;
    }
    this.push(
      frame('transcription', { text: e.text, final: e.final, language: e.language ?? this.settings.language, timestampMs: this.clock.now() }),
    );
  }

  private onDrop(err: unknown): void {
    if (this.closed || this.reconnecting) return;
    this.subscription?.unsubscribe();
    this.stream = undefined;
    this.reconnecting = this.reconnect(err).finally(() => (this.reconnecting = undefined));
  }

  private async reconnect(cause: unknown): Promise<void> {
    let delay = this.settings.reconnectBaseMs;
    for (let attempt = 1; attempt <= this.settings.reconnectAttempts; attempt++) {
      try {
        await this.clock.sleep(delay);
        if (this.closed) return;
        await this.connect();
        this.reconnects++;
        const pending = concat(this.replay);
        if (pending.length) this.stream!.sendAudio(pending);
        return;
      } catch (err) {
        if (isAbortError(err) || this.closed) return;
        delay = Math.min(delay * 2, this.settings.reconnectMaxMs);
      }
    }
    this.failed = true;
    const reason = cause instanceof Error ? cause.message : String(cause);
    this.pushError(`speech-to-text connection lost and ${this.settings.reconnectAttempts} reconnect attempts failed (${reason})`, {
      code: 'stt_unavailable',
    });
  }

  /** True after reconnecting failed for good. */
  get unavailable(): boolean {
    return this.failed;
  }

  private async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.subscription?.unsubscribe();
    const stream = this.stream;
    this.stream = undefined;
    await stream?.close().catch(() => undefined);
  }
}
