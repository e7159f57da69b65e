/**
 * Frames: the only thing that moves through a pipeline.
 *
 * A frame is a plain immutable object with a `type` discriminant, a process-unique `id`, an
 * optional presentation time `pts` (ms) and free-form `meta`. Every type belongs to one class:
 *
 * - system frames bypass queues and are handled the moment they arrive (start, cancel,
 *   interruption, speaking state, errors, metrics, input audio);
 * - data frames and control frames are processed in order, one at a time, and an interruption
 *   drops them unless they are uninterruptible (end frames and tool-call progress/results always
 *   are; any frame can be marked so with `uninterruptible: true`).
 */

export type Direction = 'downstream' | 'upstream';
export type FrameClass = 'system' | 'data' | 'control';

export interface AudioPayload {
  /** Interleaved 16-bit PCM. */
  readonly pcm: Int16Array;
  readonly sampleRate: number;
  readonly channels: number;
}

export type ImageFormat = 'jpeg' | 'rgb' | 'i420';

export interface ImagePayload {
  readonly width: number;
  readonly height: number;
  readonly format: ImageFormat;
  readonly data: Uint8Array;
}

export interface WordTiming {
  readonly word: string;
  /** Relative to the start of the audio the words belong to. */
  readonly startMs: number;
  readonly endMs: number;
}

export interface ToolCall {
  readonly toolCallId: string;
  readonly name: string;
  /** Arguments as the model produced them: a JSON string. */
  readonly arguments: string;
}

export type MetricsData =
  | { readonly kind: 'ttfb'; readonly processor: string; readonly valueMs: number; readonly model?: string }
  | { readonly kind: 'processing'; readonly processor: string; readonly valueMs: number; readonly model?: string }
  | { readonly kind: 'usage'; readonly processor: string; readonly counters: Readonly<Record<string, number>>; readonly model?: string };

/** Payload of each frame type, keyed by its `type`. */
export interface FramePayloads {
  // ---- system -------------------------------------------------------------------------------
  start: {
    readonly audioInSampleRate: number;
    readonly audioOutSampleRate: number;
    readonly allowInterruptions: boolean;
    readonly enableMetrics: boolean;
  };
  cancel: { readonly reason?: string };
  /** Stop what is being said now: queued interruptible frames are dropped everywhere. */
  interruption: Record<never, never>;
  /** Sent upstream by a processor that wants the worker to interrupt (e.g. a VAD on barge-in). */
  'interruption-request': { readonly reason?: string };
  /** The user's turn started (the turn processor's decision; processors/turns). */
  'user-started-speaking': Record<never, never>;
  /**
   * The user's turn ended (the turn processor's decision). `endOfTurnMs`: the wait after the VAD's
   * short pause before deciding (the end-of-turn stage of a latency report); `decision`: what the
   * turn analyzer said.
   */
  'user-stopped-speaking': { readonly endOfTurnMs?: number; readonly decision?: string };
  /** Raw voice activity from the VAD: speech began (after its `startMs`). */
  'vad-speech-started': Record<never, never>;
  /** Raw voice activity from the VAD: `silenceMs` of silence followed speech (its `stopMs`). */
  'vad-speech-stopped': { readonly silenceMs: number };
  /** Visitor sound over the bot: its audio (and the face's speech) pauses, to resume or be cut. */
  'bot-pause': Record<never, never>;
  /**
   * A pause ended: `resumed` (a backchannel or no words: playback continues from the same sample)
   * or `interrupted` (real words: an interruption follows). `text`: the words that decided.
   */
  'bot-pause-ended': { readonly outcome: 'resumed' | 'interrupted'; readonly reason: 'backchannel' | 'no_words' | 'words' | 'long_speech'; readonly text: string };
  /**
   * The turn processor waits on a pause it judged `unsure` or `incomplete`: the user turn
   * aggregator may start a preemptive reply from the words so far (held until the turn ends).
   */
  'user-turn-pending': { readonly decision: string; readonly reason: string };
  /** A preemptive reply was decided: `use` plays its held frames, otherwise they are dropped. */
  'reply-decision': { readonly replyId: string; readonly use: boolean; readonly text: string };
  'bot-started-speaking': Record<never, never>;
  'bot-stopped-speaking': Record<never, never>;
  error: { readonly message: string; readonly fatal: boolean; readonly processor?: string; readonly code?: string; readonly cause?: unknown };
  metrics: { readonly data: readonly MetricsData[] };
  'input-audio': AudioPayload;
  'input-image': ImagePayload;
  'vad-confidence': { readonly confidence: number };
  // ---- data ---------------------------------------------------------------------------------
  text: { readonly text: string };
  transcription: {
    readonly text: string;
    readonly final: boolean;
    readonly userId?: string;
    readonly language?: string;
    readonly timestampMs?: number;
  };
  'llm-text': { readonly text: string };
  /** Replace or extend the conversation context (system context appended by a client, etc.). */
  'llm-messages': {
    readonly messages: readonly LLMMessage[];
    readonly mode: 'append' | 'replace';
    readonly run: boolean;
    /** A preemptive run (processors/turns): its reply is held until decided, and it never runs tools. */
    readonly replyId?: string;
  };
  /** Text the bot must say verbatim (greeting, farewell, nudge). */
  'tts-speak': { readonly text: string };
  /** Words of the bot's answer as the output actually plays them (what the user heard). */
  'tts-text': { readonly text: string };
  'tts-audio': AudioPayload & { readonly words?: readonly WordTiming[]; readonly phonemes?: readonly PhonemeTiming[] };
  'output-audio': AudioPayload;
  'output-image': ImagePayload & { readonly frameIndex?: number; readonly frameType?: string };
  /** Complete tool calls of one model response, surfaced by the LLM side. */
  'tool-calls': { readonly responseId: string; readonly calls: readonly ToolCall[] };
  'tool-call-in-progress': ToolCall;
  'tool-call-result': ToolCall & { readonly result: unknown; readonly isError: boolean; readonly runLlm: boolean };
  /** A message for the session's client (e.g. a client-delivered tool call, transcripts). */
  'client-message': { readonly message: Readonly<Record<string, unknown>> };
  // ---- control ------------------------------------------------------------------------------
  end: { readonly reason?: string };
  heartbeat: { readonly sentAtMs: number };
  'llm-response-start': { readonly responseId: string };
  'llm-response-end': { readonly responseId: string };
  'tts-started': { readonly contextId?: string };
  'tts-stopped': { readonly contextId?: string };
  /** Frames after it, up to `reply-end` of the same id, belong to a preemptive reply (held until decided). */
  'reply-start': { readonly replyId: string };
  'reply-end': { readonly replyId: string };
}

export interface PhonemeTiming {
  readonly phoneme: string;
  readonly startMs: number;
  readonly endMs: number;
}

export interface LLMMessage {
  readonly role: 'system' | 'user' | 'assistant' | 'tool';
  readonly content: string | null;
  readonly toolCalls?: readonly ToolCall[];
  readonly toolCallId?: string;
}

export type FrameType = keyof FramePayloads;

export interface FrameHeader {
  readonly id: number;
  /** Presentation time in ms (the playback clock of the output), when known. */
  readonly pts?: number;
  readonly meta?: Readonly<Record<string, unknown>>;
  /** Survives interruptions even if its type normally does not. */
  readonly uninterruptible?: boolean;
}

export type FrameOf<T extends FrameType> = FrameHeader & { readonly type: T } & FramePayloads[T];
export type Frame = { [K in FrameType]: FrameOf<K> }[FrameType];

/** The class of every frame type, in one table so nothing is classified twice. */
export const FRAME_CLASS: { readonly [K in FrameType]: FrameClass } = {
  start: 'system',
  cancel: 'system',
  interruption: 'system',
  'interruption-request': 'system',
  'user-started-speaking': 'system',
  'user-stopped-speaking': 'system',
  'bot-started-speaking': 'system',
  'bot-stopped-speaking': 'system',
  error: 'system',
  metrics: 'system',
  'input-audio': 'system',
  'input-image': 'system',
  'vad-confidence': 'system',
  'vad-speech-started': 'system',
  'vad-speech-stopped': 'system',
  'bot-pause': 'system',
  'bot-pause-ended': 'system',
  'reply-decision': 'system',
  'user-turn-pending': 'system',
  text: 'data',
  transcription: 'data',
  'llm-text': 'data',
  'llm-messages': 'data',
  'tts-speak': 'data',
  'tts-text': 'data',
  'tts-audio': 'data',
  'output-audio': 'data',
  'output-image': 'data',
  'tool-calls': 'data',
  'tool-call-in-progress': 'data',
  'tool-call-result': 'data',
  'client-message': 'data',
  end: 'control',
  heartbeat: 'control',
  'llm-response-start': 'control',
  'llm-response-end': 'control',
  'tts-started': 'control',
  'tts-stopped': 'control',
  'reply-start': 'control',
  'reply-end': 'control',
};

/** Types that survive an interruption whatever their class. */
const ALWAYS_UNINTERRUPTIBLE: ReadonlySet<FrameType> = new Set<FrameType>([
  'end',
  'tool-call-in-progress',
  'tool-call-result',
]);

let lastId = 0;

/** Creates a frame with a fresh id. */
export function frame<T extends FrameType>(
  type: T,
  payload: FramePayloads[T],
  header: Omit<FrameHeader, 'id'> = {},
): FrameOf<T> {
  return { ...header, ...payload, type, id: ++lastId } as unknown as FrameOf<T>;
}

/** Frame types whose payload fields are all optional. */
export type SignalType = { [K in FrameType]: {} extends FramePayloads[K] ? K : never }[FrameType];

/** Creates a frame of a type that needs no payload (`signal('interruption')`). */
export function signal<T extends SignalType>(type: T, header: Omit<FrameHeader, 'id'> = {}): FrameOf<T> {
  return { ...header, type, id: ++lastId } as unknown as FrameOf<T>;
}

export function frameClass(f: Frame): FrameClass {
  return FRAME_CLASS[f.type];
}

export function isSystemFrame(f: Frame): boolean {
  return FRAME_CLASS[f.type] === 'system';
}

export function isInterruptible(f: Frame): boolean {
  return !(f.uninterruptible || ALWAYS_UNINTERRUPTIBLE.has(f.type));
}

export function isFrameType<T extends FrameType>(f: Frame, type: T): f is Extract<Frame, { type: T }> {
  return f.type === type;
}

/** Exhaustiveness guard for `switch (frame.type)`. */
export function assertNever(x: never): never {
  throw new Error(`unhandled frame: ${JSON.stringify(x)}`);
}

/** Short description for logs and test failures (no sample data). */
export function describeFrame(f: Frame): string {
  switch (f.type) {
    case 'text':
    case 'llm-text':
    case 'tts-speak':
    case 'tts-text':
      return `${f.type}#${f.id}(${JSON.stringify(f.text)})`;
    case 'transcription':
      return `${f.type}#${f.id}(${JSON.stringify(f.text)}, final=${f.final})`;
    case 'error':
      return `${f.type}#${f.id}(${f.message}${f.fatal ? ', fatal' : ''})`;
    case 'input-audio':
    case 'tts-audio':
    case 'output-audio':
      return `${f.type}#${f.id}(${f.pcm.length / f.channels} samples @${f.sampleRate})`;
    default:
      return `${f.type}#${f.id}`;
  }
}
