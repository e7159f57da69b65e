/**
 * STTProcessor: streams input audio to a speech-to-text service and turns its results into
 * transcription frames (interim and final), in the agent's language.
 *
 * Connections drop. Audio not yet covered by a final transcript is kept (bounded), so after a
 * drop the processor reconnects with exponential backoff and replays it: the words the user said
 * while the provider was away are not lost. A final covers the audio up to its `endMs` (the
 * provider's time base is the audio sent on that connection); a final without `endMs` covers
 * everything sent. When audio that was never transcribed fell out of the replay buffer before it
 * could be replayed, a clear error frame goes upstream. A bot that cannot hear must not carry on
 * as if it could: when reconnecting fails for good (the reconnect budget is spent, or the provider
 * refused the connection in a way no retry fixes: a `ProviderError` that is not `retryable`, such
 * as a revoked key), the error frame is fatal, so the worker ends the pipeline with that reason and the
 * session records it. Input that is not mono PCM at a positive sample rate is refused with an
 * error frame; nothing crashes.
 */
import type { Subscription } from 'rxjs';
import { StreamResampler, concat } from '../../core/audio.ts';
import { frame, type Direction, type Frame } from '../../core/frames.ts';
import { ProcessorMetrics } from '../../core/metrics.ts';
import { resolveOptions, type OptionsFor, type Resolved } from '../../core/options.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import { WORKER_DEFAULTS } from '../../core/worker.ts';
import { providerFailure } from '../provider-failure.ts';
import { ReconnectPolicy } from '../reconnect-policy.ts';
import type { STTService, STTStream, TranscriptEvent } from '../services.ts';
import { errorMessage } from '../../core/error-message.ts';

export const STT_DEFAULTS = {
  /** Language code when the agent sets none. */
  language: 'en',
  /** Ask the provider for interim hypotheses. */
  interimResults: true,
  /** First reconnect delay; doubles on each failed attempt. */
  reconnectBaseMs: 250,
  /** Longest wait between reconnect attempts. */
  reconnectMaxMs: 4_000,
  /**
   * Reconnect budget: attempts before giving up (the processor then ends the pipeline with a fatal
   * `stt_unavailable`). A connection that opens and drops again within `stableConnectionMs` does
   * not refill it, so a provider that accepts and closes at once, again and again, is given up on
   * like one that refuses.
   */
  reconnectAttempts: 6,
  /** A connection that stayed open this long (ms) was a working one: the budget is refilled when it drops. */
  stableConnectionMs: 5_000,
  /** Audio kept for replay after a drop (ms). Older audio cannot be replayed. */
  replayBufferMs: 15_000,
  /** Sample rate sent to the provider; undefined = the pipeline's input rate. */
  sampleRate: undefined as number | undefined,
  /** Provider model; undefined = the plugin's own default. */
  model: undefined as string | undefined,
} as const;

export interface STTOptions extends ProcessorOptions, OptionsFor<typeof STT_DEFAULTS> {}

export class STTProcessor extends FrameProcessor {
  private readonly settings: Resolved<typeof STT_DEFAULTS>;
  private stream: STTStream | undefined;
  private subscription: Subscription | undefined;
  private readonly resampling = new StreamResampler(() => this.rate);
  /** Audio not yet covered by a final transcript; `replayStart` is the index of its first sample. */
  private replay: Int16Array[] = [];
  private replaySamples = 0;
  private replayStart = 0;
  /** Samples received since start, and the index of the first sample sent on the live connection. */
  private received = 0;
  private streamBase = 0;
  /** Samples known to be transcribed (covered by finals). */
  private acknowledged = 0;
  private badInputReported = false;
  /** Rate sent to the provider: set from the start frame (or the option); the worker's default until then. */
  private rate: number = WORKER_DEFAULTS.audioInSampleRate;
  private reconnecting: Promise<void> | undefined;
  private closed = false;
  private failed = false;
  private readonly reconnection: ReconnectPolicy;
  /**
   * The VAD asked for a final (user stopped speaking) and none has come yet. A request lost with a
   * dropped connection is asked again once the replay is on the new one: a provider that only
   * transcribes on request (a batch server cut at the VAD stop) would otherwise hold those words
   * until the next turn.
   */
  private finalizePending = false;
  private readonly metrics = ProcessorMetrics.for(this.name, () => this.clock, (f) => this.push(f), () => this.startFrame?.enableMetrics ?? false);
  /** Reconnections performed (diagnostics, tests). */
  reconnects = 0;
  /** Aborted when the processor ends: a connection attempt under way gives up. */
  private readonly stopping = new AbortController();

  constructor(private readonly service: STTService, options: STTOptions = {}) {
    super(options);
    this.settings = resolveOptions(STT_DEFAULTS, options);
    const s = this.settings;
    this.reconnection = new ReconnectPolicy({ baseMs: s.reconnectBaseMs, maxMs: s.reconnectMaxMs, attempts: s.reconnectAttempts, stableConnectionMs: s.stableConnectionMs }, () => this.clock);
  }

  protected override async onStart(start: Frame & { type: 'start' }): Promise<void> {
    this.rate = this.settings.sampleRate ?? start.audioInSampleRate;
    try {
      await this.connect();
      // Audio that arrived while the first connection was opening is sent now, not lost.
      this.sendPending();
    } catch (err) {
      this.onDrop(err);
    }
  }

  protected override async onEnd(): Promise<void> {
    await this.close();
  }

  protected override onCancel(): void {
    this.releasing(this.close());
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'input-audio':
        if (f.channels === 1 && f.sampleRate > 0 && Number.isFinite(f.sampleRate)) this.sendAudio(f.pcm, f.sampleRate);
        else this.refuseInput(f.channels, f.sampleRate);
        break;
      case 'vad-speech-started':
        if (direction === 'downstream') this.finalizePending = false;
        break;
      case 'vad-speech-stopped':
        // Every pause is finalized, not only the end of a turn: the turn analyzer decides from
        // the words said before the pause, and a preemptive reply starts from them.
        if (direction === 'downstream') {
          this.metrics.startTtfb();
          this.finalizePending = true;
          this.stream?.finalize();
        }
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private sendAudio(pcm: Int16Array, sampleRate: number): void {
    const audio = this.resampling.convert(pcm, sampleRate);
    this.remember(audio);
    if (this.stream && !this.reconnecting) this.stream.sendAudio(audio);
  }

  /** Reported once per session: the transport should deliver mono PCM (see core/frames.ts). */
  private refuseInput(channels: number, sampleRate: number): void {
    if (this.badInputReported) return;
    this.badInputReported = true;
    this.pushError(`input audio must be mono PCM at a positive sample rate (got ${channels} channel(s) at ${sampleRate} Hz); it is not transcribed`, {
      code: 'unsupported_audio',
    });
  }

  private remember(audio: Int16Array): void {
    this.replay.push(audio);
    this.replaySamples += audio.length;
    this.received += audio.length;
    const max = (this.settings.replayBufferMs / 1000) * this.rate;
    while (this.replaySamples > max && this.replay.length > 1) {
      const dropped = this.replay.shift()!.length;
      this.replaySamples -= dropped;
      this.replayStart += dropped;
    }
  }

  /** Forgets replay audio up to sample `index` (it has been transcribed). */
  private acknowledge(index: number): void {
    this.acknowledged = Math.max(this.acknowledged, Math.min(index, this.received));
    while (this.replay.length && this.replayStart + this.replay[0]!.length <= this.acknowledged) {
      const dropped = this.replay.shift()!.length;
      this.replaySamples -= dropped;
      this.replayStart += dropped;
    }
    const head = this.replay[0];
    if (head && this.replayStart < this.acknowledged) {
      const cut = this.acknowledged - this.replayStart;
      this.replay[0] = head.subarray(cut);
      this.replaySamples -= cut;
      this.replayStart += cut;
    }
  }

  /** Sends the replay buffer on a fresh connection; its time 0 is the buffer's first sample. */
  private sendPending(): void {
    this.streamBase = this.replayStart;
    const pending = concat(this.replay);
    if (pending.length) this.stream?.sendAudio(pending);
    if (this.finalizePending) this.stream?.finalize();
  }

  private async connect(): Promise<void> {
    const stream = await this.service.connect({
      language: this.settings.language,
      sampleRate: this.rate,
      channels: 1,
      interimResults: this.settings.interimResults,
      model: this.settings.model,
    }, this.stopping.signal);
    if (this.closed) {
      // Ended while this connection was being opened (a hang-up during the first connect or a
      // reconnect): it is closed now, never kept (its keep-alives would hold the process open).
      await stream.close().catch(() => undefined);
      throw new Error('the speech-to-text processor ended while connecting');
    }
    this.stream = stream;
    this.reconnection.opened();
    this.subscription = stream.transcripts.subscribe({
      next: (e) => this.onTranscript(e),
      error: (err) => this.onDrop(err),
      complete: () => {
        if (!this.closed) this.onDrop(new Error('connection closed by the provider'));
      },
    });
  }

  private onTranscript(e: TranscriptEvent): void {
    if (!e.text.trim()) return; // boundary markers (e.g. Deepgram UtteranceEnd) carry no words
    if (e.final) {
      this.metrics.stopTtfb();
      this.finalizePending = false;
      // A final covers the audio up to its end (everything sent, when the provider gives no end):
      // that audio never needs replaying.
      const end = e.endMs !== undefined && Number.isFinite(e.endMs) ? this.streamBase + Math.round((e.endMs * this.rate) / 1000) : this.received;
      this.acknowledge(end);
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
    const outcome = await this.reconnection.reconnect(cause, () => this.connect(), { stopped: () => this.closed });
    if (outcome.kind === 'reconnected') {
      this.reconnects++;
      this.reportLostAudio();
      this.sendPending();
    } else if (outcome.kind === 'permanent') {
      // A refusal no retry can fix (revoked key, refused parameters) ends it at once.
      this.giveUp(outcome.error);
    } else if (outcome.kind === 'exhausted') {
      const lastText = outcome.last === undefined ? '' : `; last attempt: ${errorMessage(outcome.last)}`;
      this.giveUp(cause, `speech-to-text connection lost and ${this.settings.reconnectAttempts} reconnect attempts failed (${errorMessage(cause)}${lastText})`);
    }
  }

  /**
   * The processor can no longer hear: a fatal error frame, so the worker ends the pipeline with
   * this reason rather than leave a bot that talks on without hearing anyone.
   */
  private giveUp(err: unknown, exhausted?: string): void {
    this.failed = true;
    if (exhausted) {
      this.pushError(exhausted, { code: 'stt_unavailable', fatal: true, cause: err });
      return;
    }
    const failure = providerFailure('stt', err);
    this.pushError(`speech-to-text ${this.service.name} refused the connection: ${failure.message}`, { code: failure.code, fatal: true, cause: err });
  }

  /** Untranscribed audio older than the replay buffer cannot be replayed: say so. */
  private reportLostAudio(): void {
    const lost = this.replayStart - this.acknowledged;
    if (lost <= 0) return;
    this.acknowledged = this.replayStart;
    const ms = Math.round((lost / this.rate) * 1000);
    this.pushError(`speech-to-text reconnected, but ${ms} ms of speech older than the ${this.settings.replayBufferMs} ms replay buffer could not be replayed and was not transcribed`, {
      code: 'stt_audio_lost',
    });
  }

  /** True after reconnecting failed for good (the processor has ended the pipeline). */
  get unavailable(): boolean {
    return this.failed;
  }

  private async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopping.abort(new Error('the speech-to-text processor ended'));
    this.subscription?.unsubscribe();
    const stream = this.stream;
    this.stream = undefined;
    await stream?.close().catch(() => undefined);
  }
}
