/**
 * Vendor-neutral contracts between the pipeline processors (STT, LLM, TTS, VAD) and the engines
 * that plugins provide. A plugin implements one of these with its vendor's SDK (or offline);
 * the processors in this folder add everything that is not vendor-specific: buffering,
 * reconnect with backoff, sentence aggregation, tool-call accumulation, interruption, metrics.
 */
import type { Observable } from 'rxjs';
import type { LLMMessage, PhonemeTiming, WordTiming } from '../core/frames.ts';

// ---- speech-to-text -------------------------------------------------------------------------

export interface TranscriptEvent {
  readonly text: string;
  /** false = interim hypothesis that later events may revise. */
  readonly final: boolean;
  /** The provider considers the utterance finished (e.g. Deepgram speech_final / UtteranceEnd). */
  readonly endOfUtterance?: boolean;
  readonly language?: string;
  readonly confidence?: number;
  readonly startMs?: number;
  readonly endMs?: number;
}

export interface STTStreamOptions {
  /** BCP-47-ish language code from the agent (`en`, `fr`, `pt-BR`, ...). */
  readonly language: string;
  readonly sampleRate: number;
  readonly channels: number;
  readonly interimResults: boolean;
  readonly model?: string;
}

/** One live recognition connection. */
export interface STTStream {
  sendAudio(pcm: Int16Array): void;
  /** Asks the provider to flush pending audio into a final result. */
  finalize(): void;
  /**
   * Transcripts. Completes when the connection closes normally; errors when it drops
   * (the STT processor then reconnects with backoff and replays unacknowledged audio).
   */
  readonly transcripts: Observable<TranscriptEvent>;
  close(): Promise<void>;
}

export interface STTService {
  readonly name: string;
  /**
   * What the transcripts' terminal punctuation means. `sentences` (the default, cloud providers):
   * a `.` or `?` ends a sentence the speaker finished. `segments`: the recogniser closes every
   * piece of audio it is given (`stt:moonshine` writes "He was not." for a speaker who paused after
   * "He was not"), so the turn analyzer does not read its `.` or `!` as an ending (a `?` it does).
   */
  readonly punctuation?: 'sentences' | 'segments';
  connect(options: STTStreamOptions, signal?: AbortSignal): Promise<STTStream>;
}

// ---- language model -------------------------------------------------------------------------

/** Function definition as the model sees it (`parameters` keeps only properties + required). */
export interface ToolDefinition {
  readonly name: string;
  readonly description?: string;
  readonly parameters: {
    readonly type: 'object';
    readonly properties: Readonly<Record<string, unknown>>;
    readonly required?: readonly string[];
  };
}

export interface LLMRequest {
  readonly messages: readonly LLMMessage[];
  readonly tools?: readonly ToolDefinition[];
  readonly maxTokens?: number;
  readonly temperature?: number;
  readonly signal?: AbortSignal;
}

export type LLMEvent =
  | { readonly type: 'text'; readonly text: string }
  /** Streamed piece of a tool call; `index` identifies the call within the response. */
  | {
      readonly type: 'tool-call-delta';
      readonly index: number;
      readonly id?: string;
      readonly name?: string;
      readonly argumentsDelta?: string;
    }
  | { readonly type: 'usage'; readonly promptTokens: number; readonly completionTokens: number }
  | { readonly type: 'done'; readonly finishReason: string };

export interface LLMService {
  readonly name: string;
  readonly model?: string;
  /** Streams one response. Must stop promptly (throwing an AbortError) when `signal` aborts. */
  stream(request: LLMRequest): AsyncIterable<LLMEvent>;
}

// ---- text-to-speech -------------------------------------------------------------------------

export interface TTSRequest {
  readonly text: string;
  readonly voiceId?: string;
  readonly language?: string;
  /** Sample rate the pipeline wants; services resample or request it from the provider. */
  readonly sampleRate: number;
  readonly signal?: AbortSignal;
}

export type TTSEvent =
  | { readonly type: 'audio'; readonly pcm: Int16Array; readonly sampleRate: number }
  /** Word timings relative to the start of this request's audio. */
  | { readonly type: 'words'; readonly words: readonly WordTiming[] }
  /** Phoneme timings relative to the start of this request's audio (used for lip sync). */
  | { readonly type: 'phonemes'; readonly phonemes: readonly PhonemeTiming[] };

export interface TTSService {
  readonly name: string;
  /** Synthesises one piece of text (a sentence or clause). Must honour `signal`. */
  synthesize(request: TTSRequest): AsyncIterable<TTSEvent>;
  /**
   * Releases what the service keeps open between pieces (a WebSocket kept for the session's
   * sentences). Optional; the TTS processor calls it when the pipeline ends or is cancelled, and
   * the service may be used again afterwards (it reopens).
   */
  close?(): void;
}

// ---- voice activity -------------------------------------------------------------------------

export interface VADAnalyzer {
  readonly sampleRate: number;
  /** Samples per analysis window. */
  readonly windowSamples: number;
  /** Speech confidence in [0, 1] for exactly `windowSamples` mono samples. */
  confidence(window: Int16Array): number;
  reset(): void;
}

// ---- end of turn ----------------------------------------------------------------------------

/** What a turn analyzer says about a pause: end the turn now, keep listening, or wait a middle bound. */
export type TurnDecision = 'complete' | 'incomplete' | 'unsure';

export interface TurnVerdict {
  readonly decision: TurnDecision;
  /** Short reason for reports and diagnostics (e.g. `text:closed`, `prosody:fall`). */
  readonly reason: string;
}

/** Everything the pipeline knows about a pause in the user's speech. */
export interface TurnSignals {
  /** The user's words in this turn so far: final transcripts, then the latest interim one. Empty when none came. */
  readonly transcript: string;
  /** The agent's language (`en`, `fr`, ...): which word lists apply. */
  readonly language: string;
  /** The latest audio of the turn, ending now (mono int16): its tail is `silenceMs` of silence. */
  readonly audio: Int16Array;
  readonly sampleRate: number;
  /** Silence since the user's last speech (ms). */
  readonly silenceMs: number;
  /** The STT's terminal punctuation ends sentences (`STTService.punctuation`); false: it closes every segment. Default true. */
  readonly closingPunctuation?: boolean;
}

/**
 * Decides whether a pause ends the user's turn (processors/turns/turn-processor.ts asks it after
 * the VAD's short pause, and again whenever new words arrive during the pause). Pluggable like
 * `VADAnalyzer`: the built-in `RuleTurnAnalyzer` reads the words' endings and the prosody; a model
 * (e.g. an end-of-turn classifier) can take its place.
 *
 * It answers at once (the built-in one takes well under a millisecond, on the pipeline's thread)
 * or later, with a promise: a model running in a worker thread or another process. While an
 * answer is pending the turn waits as for an unfinished one (it ends at the incomplete bound at
 * the latest, `incomplete (analyzer:pending)`), and the answer, when it comes, is applied against
 * the silence measured from the pause (a `complete` that comes late ends the turn at once).
 * `signal` aborts when the answer is no longer wanted (the visitor spoke again, newer words asked
 * again, the turn ended, the pipeline stopped); a late answer is ignored either way. A failure
 * (a throw or a rejected promise) reads as `unsure` (`analyzer:error`) and is reported once per
 * session as a non-fatal `turn_analyzer_failed` error.
 */
export interface TurnAnalyzer {
  readonly name: string;
  analyze(signals: TurnSignals, options?: { readonly signal: AbortSignal }): TurnVerdict | PromiseLike<TurnVerdict>;
}
