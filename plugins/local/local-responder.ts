/**
 * `llm:local`: an offline stand-in for a language model. It does not understand anything: it
 * answers from the rules in responder/responder-rules.ts, deterministically (same conversation,
 * same answer, same tool-call id), in the pinned language when it has phrases for it, streams
 * its answer in word-sized deltas like a real model, calls tools by a documented phrase, and
 * reports estimated usage. It exists so demos and end-to-end tests run with no cloud key.
 */
import { abortError, type Clock } from '../../core/clock.ts';
import type { LLMMessage } from '../../core/frames.ts';
import type { LLMEvent, LLMRequest, LLMService } from '../../processors/services.ts';
import { LocalEngineError } from './local-engine-error.ts';
import { decideReply, type Reply } from './responder/responder-rules.ts';

export const LOCAL_RESPONDER_DEFAULTS = {
  /** Words per text delta. */
  wordsPerDelta: 1,
  /** Characters per tool-argument delta (arguments stream in pieces, as real models do). */
  argumentCharsPerDelta: 12,
  /** Delay before the first delta (ms); needs `clock`. 0 = answer at once. */
  firstDeltaDelayMs: 0,
  /** Delay between deltas (ms); needs `clock`. */
  deltaDelayMs: 0,
  /** Rough size of a token, used for the usage estimate and `maxTokens`. */
  charsPerToken: 4,
} as const;

export interface LocalResponderOptions {
  readonly wordsPerDelta?: number;
  readonly argumentCharsPerDelta?: number;
  readonly firstDeltaDelayMs?: number;
  readonly deltaDelayMs?: number;
  /** Required for non-zero delays (a VirtualClock in tests). */
  readonly clock?: Clock;
}

export class LocalResponder implements LLMService {
  readonly name = 'local-responder';
  readonly model = 'offline-stand-in';
  private readonly settings: Required<Omit<LocalResponderOptions, 'clock'>>;
  private readonly clock: Clock | undefined;

  constructor(options: LocalResponderOptions = {}) {
    const { clock, ...rest } = options;
    const d = LOCAL_RESPONDER_DEFAULTS;
    // `??` rather than a spread: an option passed as undefined keeps its default.
    this.settings = {
      wordsPerDelta: rest.wordsPerDelta ?? d.wordsPerDelta,
      argumentCharsPerDelta: rest.argumentCharsPerDelta ?? d.argumentCharsPerDelta,
      firstDeltaDelayMs: rest.firstDeltaDelayMs ?? d.firstDeltaDelayMs,
      deltaDelayMs: rest.deltaDelayMs ?? d.deltaDelayMs,
    };
    this.clock = clock;
    if ((this.settings.firstDeltaDelayMs > 0 || this.settings.deltaDelayMs > 0) && !clock) {
      throw new LocalEngineError('invalid_options', 'delays need a clock');
    }
    if (!(this.settings.wordsPerDelta >= 1) || !(this.settings.argumentCharsPerDelta >= 1)) {
      throw new LocalEngineError('invalid_options', 'wordsPerDelta and argumentCharsPerDelta must be at least 1');
    }
  }

  async *stream(request: LLMRequest): AsyncGenerator<LLMEvent> {
    const { signal } = request;
    const check = () => {
      if (signal?.aborted) throw abortError(signal.reason);
    };
    check();
    const reply = decideReply({ messages: request.messages, tools: request.tools ?? [] });
    const tokens = (chars: number) => Math.ceil(chars / LOCAL_RESPONDER_DEFAULTS.charsPerToken);
    const promptTokens = tokens(promptChars(request));
    let completionChars = 0;
    let finishReason = reply.kind === 'tool-call' ? 'tool_calls' : 'stop';

    let first = true;
    for (const event of this.deltas(reply, request)) {
      await this.pause(first ? this.settings.firstDeltaDelayMs : this.settings.deltaDelayMs, signal);
      check();
      first = false;
      if (event.type === 'text') completionChars += event.text.length;
      if (event.type === 'tool-call-delta') completionChars += (event.name?.length ?? 0) + (event.argumentsDelta?.length ?? 0);
      if (event.type === 'done') finishReason = event.finishReason;
      else yield event;
    }
    check();
    yield { type: 'usage', promptTokens, completionTokens: tokens(completionChars) };
    yield { type: 'done', finishReason };
  }

  private *deltas(reply: Reply, request: LLMRequest): Generator<LLMEvent> {
    if (reply.kind === 'tool-call') {
      const args = JSON.stringify(reply.arguments);
      const id = `call_local_${fnv1a(JSON.stringify(request.messages) + reply.name + args)}`;
      yield { type: 'tool-call-delta', index: 0, id, name: reply.name, argumentsDelta: '' };
      for (let i = 0; i < args.length; i += this.settings.argumentCharsPerDelta) {
        yield { type: 'tool-call-delta', index: 0, argumentsDelta: args.slice(i, i + this.settings.argumentCharsPerDelta) };
      }
      return;
    }
    const budget = request.maxTokens !== undefined ? request.maxTokens * LOCAL_RESPONDER_DEFAULTS.charsPerToken : Infinity;
    const words = reply.text.match(/\S+\s*/g) ?? [];
    let used = 0;
    for (let i = 0; i < words.length; i += this.settings.wordsPerDelta) {
      const piece = words.slice(i, i + this.settings.wordsPerDelta).join('');
      if (used + piece.trimEnd().length > budget) {
        yield { type: 'done', finishReason: 'length' };
        return;
      }
      used += piece.length;
      yield { type: 'text', text: piece };
    }
  }

  private async pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
    if (ms > 0 && this.clock) await this.clock.sleep(ms, signal);
    // Without a delay still yield to the event loop (not just the microtask queue), so an
    // interruption arriving from I/O can abort between deltas as it would with a real model.
    else await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

function promptChars(request: LLMRequest): number {
  const messageChars = request.messages.reduce((n, m: LLMMessage) => n + (m.content?.length ?? 0) + JSON.stringify(m.toolCalls ?? []).length, 0);
  return messageChars + (request.tools ? JSON.stringify(request.tools).length : 0);
}

/** 32-bit FNV-1a, hex: a stable id from the conversation (same input, same tool-call id). */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash.toString(16).padStart(8, '0');
}
