/**
 * TTSProcessor: speaks the bot's words. Streamed `llm-text` is cut into sentences (or clauses)
 * and each piece is synthesised as soon as it is complete, so the first audio does not wait for
 * the whole answer; `tts-speak` frames are said verbatim. Audio leaves in fixed chunks as
 * `tts-audio` frames carrying the words (and phonemes, for lip sync) that start in each chunk,
 * which is how the output knows which words were really played before an interruption.
 *
 * A preemptive reply (between `reply-start` and `reply-end`, processors/turns) is synthesised like
 * any other (the reply gate holds its audio); once discarded (`reply-decision` `use: false`) its
 * synthesis is aborted and its remaining text skipped.
 */
import { AudioChunker, Resampler, concat } from '../../core/audio.ts';
import { isAbortError, linkedSignal, type TimerHandle } from '../../core/clock.ts';
import { ProviderError } from '../../core/provider-error.ts';
import { frame, type Direction, type Frame, type PhonemeTiming, type WordTiming } from '../../core/frames.ts';
import { ProcessorMetrics } from '../../core/metrics.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import { resolveOptions } from '../../core/options.ts';
import { WORKER_DEFAULTS } from '../../core/worker.ts';
import { providerFailure } from '../provider-failure.ts';
import type { TTSService } from '../services.ts';
import { SentenceAggregator, SENTENCE_DEFAULTS } from './sentence-aggregator.ts';

export const TTS_DEFAULTS = {
  /** Duration of each tts-audio frame (ms). */
  chunkMs: 20,
  /** Speaking rate assumed to place words in time when a provider gives no timings (chars/s). */
  estimatedCharsPerSecond: 14,
  clauseAfterChars: SENTENCE_DEFAULTS.clauseAfterChars,
  /** See `TTSOptions.holdAudioForWordTimings`. */
  holdAudioForWordTimings: true,
  /**
   * Longest wait (ms) for a provider's next event while a piece is synthesised: past it the piece
   * is ended as a retryable `timeout` (its audio so far stays) and the next piece goes on. A
   * stream that stalls (a socket left open, a `Flushed` or `done` that never comes) otherwise left
   * the bot silent until the visitor spoke.
   */
  streamIdleMs: 15_000,
} as const;

export interface TTSOptions extends ProcessorOptions {
  voiceId?: string;
  language?: string;
  /** Output sample rate; default: the pipeline's output rate from the start frame. */
  sampleRate?: number;
  chunkMs?: number;
  clauseAfterChars?: number;
  /** See TTS_DEFAULTS.streamIdleMs. */
  streamIdleMs?: number;
  /**
   * Whether a piece's audio waits for the provider's word timings (default: true), so each
   * `tts-audio` chunk can carry the words that start in it: an output playing the chunks itself
   * needs that. For a provider without timings it means the whole piece is synthesised before its
   * first audio leaves. `false`: audio leaves as it comes; timings that arrive later ride on the
   * next chunk with their offsets before it (negative), and a piece without timings gets its
   * estimated words on an empty chunk after its audio, with offsets back from its end. Only for
   * what places words on its own playback timeline: the voice pipeline turns it off when an
   * AvatarProcessor follows the TTS.
   */
  holdAudioForWordTimings?: boolean;
}

export class TTSProcessor extends FrameProcessor {
  private readonly sentences: SentenceAggregator;
  private readonly chunkMs: number;
  private readonly holdAudioForWordTimings: boolean;
  private speaking = false;
  private readonly metrics: ProcessorMetrics;
  private readonly streamIdleMs: number;
  /** The preemptive reply whose frames are passing, and whether it was discarded. */
  private reply: { readonly replyId: string; readonly abort: AbortController } | null = null;
  private readonly discardedReplies = new Set<string>();

  constructor(private readonly service: TTSService, private readonly options: TTSOptions = {}) {
    super(options);
    const settings = resolveOptions(TTS_DEFAULTS, options);
    this.chunkMs = settings.chunkMs;
    this.holdAudioForWordTimings = settings.holdAudioForWordTimings;
    this.streamIdleMs = settings.streamIdleMs;
    this.sentences = new SentenceAggregator(settings.clauseAfterChars);
    this.metrics = ProcessorMetrics.for(this.name, () => this.clock, (f) => this.push(f), () => this.startFrame?.enableMetrics ?? false);
  }

  protected override onEnd(): void {
    this.service.close?.();
  }

  protected override onCancel(): void {
    this.service.close?.();
  }

  private get sampleRate(): number {
    return this.options.sampleRate ?? this.startFrame?.audioOutSampleRate ?? WORKER_DEFAULTS.audioOutSampleRate;
  }

  protected override async process(f: Frame, direction: Direction, signal: AbortSignal): Promise<void> {
    if (this.reply?.abort.signal.aborted && (f.type === 'llm-text' || f.type === 'llm-response-end' || f.type === 'tts-speak')) {
      // A discarded preemptive reply: its text is not spoken (the gate drops what passes).
      return this.push(f, direction);
    }
    switch (f.type) {
      case 'reply-start':
        this.reply = { replyId: f.replyId, abort: new AbortController() };
        if (this.discardedReplies.delete(f.replyId)) this.reply.abort.abort();
        break;
      case 'reply-end':
        if (this.reply?.abort.signal.aborted) {
          this.sentences.clear();
          this.speaking = false;
        }
        this.reply = null;
        break;
      case 'reply-decision':
        if (direction === 'downstream' && !f.use) {
          if (this.reply?.replyId === f.replyId) this.reply.abort.abort();
          else if (this.discardedReplies.add(f.replyId).size > 32) this.discardedReplies.delete(this.discardedReplies.values().next().value!);
        }
        break;
      case 'llm-response-start':
        this.sentences.clear();
        break;
      case 'llm-text':
        this.push(f, direction);
        for (const piece of this.sentences.push(f.text)) await this.speak(piece, signal);
        return;
      case 'llm-response-end': {
        const rest = this.sentences.flush();
        if (rest) await this.speak(rest, signal);
        this.finishTurn();
        break;
      }
      case 'tts-speak':
        await this.speak(f.text, signal);
        this.finishTurn();
        return;
      case 'interruption':
        this.sentences.clear();
        this.speaking = false;
        this.metrics.reset();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private finishTurn(): void {
    if (!this.speaking) return;
    this.speaking = false;
    this.push(frame('tts-stopped', {}));
  }

  /** Synthesises one piece of text and pushes its audio in fixed chunks. */
  private async speak(text: string, laneSignal: AbortSignal): Promise<void> {
    const reply = this.reply?.abort.signal;
    const link = linkedSignal(reply ? AbortSignal.any([laneSignal, reply]) : laneSignal);
    try {
      await this.synthesize(text, link.signal);
    } catch (err) {
      if (isAbortError(err) || link.signal.aborted) return;
      // One piece failed (provider error, stream cut): report it and go on with the next piece;
      // the audio already sent for this one stays, with its words.
      const failure = providerFailure('tts', err);
      this.pushError(`text-to-speech ${this.service.name} failed on "${text.slice(0, 80)}": ${failure.message}`, { code: failure.code, fatal: failure.fatal, cause: err });
    } finally {
      link.release();
    }
  }

  private async synthesize(text: string, signal: AbortSignal): Promise<void> {
    if (!/[\p{L}\p{N}]/u.test(text)) return; // punctuation alone is not speech
    if (!this.speaking) {
      this.speaking = true;
      this.push(frame('tts-started', {}));
    }
    const rate = this.sampleRate;
    const chunker = new AudioChunker(rate, this.chunkMs);
    let resampler: Resampler | undefined;
    let words: WordTiming[] | undefined;
    let phonemes: PhonemeTiming[] = [];
    let sentSamples = 0;
    // Timings are handed out in order: each chunk carries those starting before its end that no
    // earlier chunk carried, so a timing that arrives after its audio rides on the next chunk
    // (with its offset before that chunk, negative) instead of being lost.
    let wordsSent = 0;
    let phonemesSent = 0;
    const emit = (pcm: Int16Array) => {
      const startMs = (sentSamples / rate) * 1000;
      const endMs = ((sentSamples + pcm.length) / rate) * 1000;
      sentSamples += pcm.length;
      const take = <T extends { startMs: number; endMs: number }>(list: readonly T[], from: number): [T[], number] => {
        let to = from;
        while (to < list.length && list[to]!.startMs < endMs) to++;
        const out = list.slice(from, to).map((w) => ({ ...w, startMs: w.startMs - startMs, endMs: w.endMs - startMs }));
        return [out, to];
      };
      let chunkWords: WordTiming[] | undefined;
      if (words) [chunkWords, wordsSent] = take(words, wordsSent);
      let chunkPhonemes: PhonemeTiming[];
      [chunkPhonemes, phonemesSent] = take(phonemes, phonemesSent);
      this.push(
        frame('tts-audio', {
          pcm,
          sampleRate: rate,
          channels: 1,
          words: chunkWords,
          phonemes: chunkPhonemes.length ? chunkPhonemes : undefined,
        }),
      );
    };
    this.metrics.startTtfb();
    const hold = this.holdAudioForWordTimings;
    const pending: Int16Array[] = [];
    // The piece's own signal, or the provider's silence bound: whichever comes first ends it.
    const idle = new AbortController();
    const stalled = () =>
      new ProviderError('timeout', `no audio from ${this.service.name} for ${this.streamIdleMs} ms while speaking "${text.slice(0, 40)}"; the rest of this piece is skipped`);
    let idleTimer: TimerHandle | undefined;
    const arm = () => {
      if (idleTimer !== undefined) this.clock.clearTimeout(idleTimer);
      idleTimer = this.clock.setTimeout(() => idle.abort(), this.streamIdleMs);
    };
    arm();
    const events = this.service.synthesize({ text, voiceId: this.options.voiceId, language: this.options.language, sampleRate: rate, signal: AbortSignal.any([signal, idle.signal]) });
    try {
      for await (const event of events) {
        arm();
        if (signal.aborted) return;
        switch (event.type) {
          case 'audio': {
            this.metrics.stopTtfb();
            let pcm = event.pcm;
            if (event.sampleRate !== rate) {
              resampler ??= new Resampler(event.sampleRate, rate);
              pcm = resampler.process(pcm);
            }
            // Word timings may arrive after the audio they describe: hold audio until we have them
            // or until the stream ends (a provider with no timings), then chunk.
            if (!words && hold) pending.push(pcm);
            else {
              let emitted = 0;
              for (const c of chunker.push(pcm)) {
                emit(c);
                emitted++;
              }
              // Let timers and I/O run before the next piece: a provider faster than real time
              // (eSpeak) has the rest of the sentence queued already, read without a pause, and the
              // burst of chunks (to the avatar, its face) would hold the event loop for tens of ms
              // (more on a loaded machine), so the face's frame due meanwhile, the first to carry
              // the answer, went out that late. Not after a piece shorter than a chunk (eSpeak's
              // first is ~11 ms): nothing went down, and the first chunk is not to wait a loop turn.
              if (emitted > 0) await yieldToEventLoop();
            }
            break;
          }
          case 'words':
            words = [...(words ?? []), ...event.words];
            if (pending.length) for (const c of chunker.push(concat(pending.splice(0)))) emit(c);
            break;
          case 'phonemes':
            phonemes = [...phonemes, ...event.phonemes];
            break;
        }
      }
    } catch (err) {
      if (idle.signal.aborted && !signal.aborted) throw stalled();
      throw err;
    } finally {
      if (idleTimer !== undefined) this.clock.clearTimeout(idleTimer);
    }
    if (signal.aborted) return;
    if (idle.signal.aborted) throw stalled();
    if (resampler) pending.push(resampler.flush());
    const untimed = !words;
    if (!words && hold) words = estimateWordTimings(text, (concat(pending).length / rate) * 1000 || estimateDurationMs(text));
    for (const c of chunker.push(concat(pending.splice(0)))) emit(c);
    const tail = chunker.flush();
    if (tail) emit(tail);
    if (untimed && !hold) {
      // The audio has gone: its estimated words follow it, placed back from its end.
      const totalMs = (sentSamples / rate) * 1000;
      const estimated = estimateWordTimings(text, totalMs || estimateDurationMs(text));
      this.push(frame('tts-audio', { pcm: new Int16Array(0), sampleRate: rate, channels: 1, words: estimated.map((w) => ({ ...w, startMs: w.startMs - totalMs, endMs: w.endMs - totalMs })) }));
    }
  }
}

/** Resolves after the event loop's pending timers and I/O callbacks have had their turn. */
function yieldToEventLoop(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

function estimateDurationMs(text: string): number {
  return (text.length / TTS_DEFAULTS.estimatedCharsPerSecond) * 1000;
}

/** Spreads words over the audio in proportion to their length (providers without timings). */
export function estimateWordTimings(text: string, durationMs: number): WordTiming[] {
  const words = text.split(/\s+/).filter(Boolean);
  const total = words.reduce((n, w) => n + w.length + 1, 0);
  let at = 0;
  return words.map((word) => {
    const len = ((word.length + 1) / total) * durationMs;
    const timing = { word, startMs: at, endMs: at + len };
    at += len;
    return timing;
  });
}
