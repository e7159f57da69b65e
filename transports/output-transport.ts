/**
 * OutputTransport: the playback clock. Audio is written in fixed chunks at real time (against
 * absolute deadlines, so it never drifts), images are written when their paired audio plays,
 * and what the bot is doing is derived from what was actually written:
 *
 * - `bot-started-speaking` when the first chunk of a turn is written;
 * - `bot-stopped-speaking` when the turn's audio has played out (`tts-stopped`), when audio
 *   runs dry for `stopAfterMs`, or at once on an interruption;
 * - `tts-text` for each word as the chunk carrying its start is written, so the assistant side
 *   of the context records only words the user heard.
 *
 * An interruption aborts the chunk being waited on and drops everything queued: the user hears
 * at most the one chunk already written.
 *
 * A pause (`bot-pause`: visitor sound over the bot, processors/turns) holds the next chunk
 * unwritten and the bot still speaking (no `bot-stopped-speaking`: the turn is not over); a
 * resume (`bot-pause-ended`, `resumed`) writes it next, so playback continues from the same
 * sample.
 */
import { AudioChunker, StreamResampler } from '../core/audio.ts';
import { frame, signal, type Direction, type Frame, type WordTiming } from '../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../core/processor.ts';
import type { TimerHandle } from '../core/clock.ts';
import { resolveOptions } from '../core/options.ts';
import { WORKER_DEFAULTS } from '../core/worker.ts';
import type { MediaSink } from './media-sink.ts';

export const OUTPUT_DEFAULTS = {
  /** Size of each audio write (ms). */
  chunkMs: 20,
  /** Audio silent this long (ms) without an explicit end means the bot stopped speaking. */
  stopAfterMs: 200,
} as const;

export interface OutputOptions extends ProcessorOptions {
  chunkMs?: number;
  stopAfterMs?: number;
  /** Output sample rate; default: the start frame's audioOutSampleRate. */
  sampleRate?: number;
}

export class OutputTransport extends FrameProcessor {
  private readonly chunkMs: number;
  private readonly stopAfterMs: number;
  private speaking = false;
  /** Clock time when the next chunk is due; the playback position. */
  private nextWriteAt: number | undefined;
  private stopTimer: TimerHandle | undefined;
  private readonly resampling = new StreamResampler(() => this.sampleRate);
  private chunker: AudioChunker | undefined;
  /** Audio written since start (ms): the presentation timestamp of the next chunk. */
  private playedMs = 0;
  private readonly sampleRateOverride: number | undefined;
  /** Words whose audio is still inside the chunker, announced with the chunk that plays it. */
  private carriedWords: string[] = [];
  private paused = false;
  private resumeWaiters: (() => void)[] = [];

  constructor(private readonly sink: MediaSink, options: OutputOptions = {}) {
    super(options);
    ({ chunkMs: this.chunkMs, stopAfterMs: this.stopAfterMs } = resolveOptions(OUTPUT_DEFAULTS, options));
    this.sampleRateOverride = options.sampleRate;
  }

  get sampleRate(): number {
    return this.sampleRateOverride ?? this.startFrame?.audioOutSampleRate ?? WORKER_DEFAULTS.audioOutSampleRate;
  }

  get botSpeaking(): boolean {
    return this.speaking;
  }

  protected override async process(f: Frame, direction: Direction, abort: AbortSignal): Promise<void> {
    if (direction === 'upstream') {
      // Processors after the output (the assistant aggregator) reach the client through it.
      if (f.type === 'client-message') return this.sink.sendMessage?.(f.message);
      return this.push(f, direction);
    }
    switch (f.type) {
      case 'tts-audio':
      case 'output-audio':
        this.push(f, direction);
        await this.play(f.pcm, f.sampleRate, f.channels, f.type === 'tts-audio' ? f.words : undefined, abort);
        return;
      case 'client-message':
        // Messages for the client keep their place in the stream: a tool call or transcript
        // reaches the client when the speech before it has been played.
        this.sink.sendMessage?.(f.message);
        break;
      case 'output-image':
        this.sink.writeImage?.(f, this.playedMs);
        this.push(f, direction);
        return;
      case 'tts-stopped':
        this.push(f, direction);
        await this.playTail(abort);
        this.botStopped();
        return;
      case 'bot-pause':
        this.paused = true;
        this.clock.clearTimeout(this.stopTimer);
        break;
      case 'bot-pause-ended':
        if (f.outcome === 'resumed') {
          this.unpause();
          // Nothing may be left to write (the pause came as the audio ended): stop as usual then.
          if (this.speaking) this.stopTimer = this.clock.setTimeout(() => this.botStopped(), this.chunkMs + this.stopAfterMs);
        }
        break;
      case 'interruption':
        this.unpause();
        this.chunker?.clear();
        this.carriedWords = [];
        this.sink.clear?.();
        this.nextWriteAt = undefined;
        this.push(f, direction);
        this.botStopped();
        return;
      case 'end':
        await this.playTail(abort);
        this.botStopped();
        break;
      case 'cancel':
        this.unpause();
        this.clock.clearTimeout(this.stopTimer);
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private async play(pcm: Int16Array, sampleRate: number, channels: number, words: readonly WordTiming[] | undefined, abort: AbortSignal): Promise<void> {
    if (channels !== 1) return; // outputs are mono; multi-channel audio is not guessed at
    const rate = this.sampleRate;
    const audio = this.resampling.convert(pcm, sampleRate);
    this.chunker ??= new AudioChunker(rate, this.chunkMs);
    const pendingWords = words ? [...words] : [];
    let offsetMs = 0;
    for (const chunk of this.chunker.push(audio)) {
      const chunkMs = (chunk.length / rate) * 1000;
      const spoken = pendingWords.filter((w) => w.startMs < offsetMs + chunkMs);
      for (const w of spoken) pendingWords.splice(pendingWords.indexOf(w), 1);
      await this.writeChunk(chunk, rate, spoken.map((w) => w.word), abort);
      offsetMs += chunkMs;
    }
    // Words whose audio is still inside the chunker are announced with the chunk that flushes it.
    if (pendingWords.length) this.carriedWords.push(...pendingWords.map((w) => w.word));
  }

  private async playTail(abort: AbortSignal): Promise<void> {
    const tail = this.chunker?.flush();
    if (tail) await this.writeChunk(tail, this.sampleRate, [], abort);
    // Words still carried were timed at (or past) the end of the audio just played: heard with
    // it, not with the next turn's first chunk.
    if (this.carriedWords.length && !abort.aborted) this.push(frame('tts-text', { text: this.carriedWords.splice(0).join(' ') }));
  }

  private async writeChunk(chunk: Int16Array, rate: number, words: string[], abort: AbortSignal): Promise<void> {
    const now = this.clock.now();
    if (this.nextWriteAt === undefined || this.nextWriteAt < now) this.nextWriteAt = now;
    // Wait for this chunk's slot: the sink always holds at most one chunk ahead of real time.
    if (this.nextWriteAt > now) await this.clock.sleep(this.nextWriteAt - now, abort);
    if (abort.aborted) return;
    if (this.paused) {
      await this.resumed(abort);
      if (abort.aborted) return;
      // Its slot passed during the pause: it plays now, and the ones after it from here.
      this.nextWriteAt = this.clock.now();
    }
    this.clock.clearTimeout(this.stopTimer);
    if (!this.speaking) {
      this.speaking = true;
      this.push(signal('bot-started-speaking'));
      this.push(signal('bot-started-speaking'), 'upstream');
    }
    this.sink.writeAudio(chunk, rate, this.playedMs);
    const chunkMs = (chunk.length / rate) * 1000;
    this.playedMs += chunkMs;
    this.nextWriteAt += chunkMs;
    const spoken = [...this.carriedWords.splice(0), ...words];
    if (spoken.length) this.push(frame('tts-text', { text: spoken.join(' ') }));
    this.stopTimer = this.clock.setTimeout(() => this.botStopped(), chunkMs + this.stopAfterMs);
  }

  private resumed(abort: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        abort.removeEventListener('abort', done);
        resolve();
      };
      this.resumeWaiters.push(done);
      abort.addEventListener('abort', done, { once: true });
    });
  }

  private unpause(): void {
    this.paused = false;
    for (const done of this.resumeWaiters.splice(0)) done();
  }

  private botStopped(): void {
    this.clock.clearTimeout(this.stopTimer);
    this.stopTimer = undefined;
    if (!this.speaking) return;
    this.speaking = false;
    this.push(signal('bot-stopped-speaking'));
    this.push(signal('bot-stopped-speaking'), 'upstream');
  }

  override cleanup(): void {
    this.clock.clearTimeout(this.stopTimer);
    super.cleanup();
  }
}
