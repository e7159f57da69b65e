/**
 * LLMProcessor: runs the language model over the shared context and streams its answer.
 *
 * A run is triggered by an `llm-messages` frame with `run: true` (the user aggregator sends one
 * when a user turn is complete) or by a tool result that asks for it. Text streams out as
 * `llm-text` frames between `llm-response-start` and `llm-response-end`. Tool calls arrive from
 * the provider as deltas; they are accumulated here and surfaced complete, as one `tool-calls`
 * frame per response, for the tool dispatcher below. An interruption aborts the provider request.
 *
 * A preemptive run (`llm-messages` with a `replyId`, processors/turns) streams like any other, but
 * its discard (`reply-decision` `use: false`) aborts it, and it never surfaces tool calls: a
 * reply that wants tools is handed back upstream (`reply-decision` `use: false`) and nothing of
 * it enters the context; the turn is answered normally once it ends.
 */
import { randomUUID } from 'node:crypto';
import { isAbortError, linkedSignal, type TimerHandle } from '../../core/clock.ts';
import { frame, type Direction, type Frame, type ToolCall } from '../../core/frames.ts';
import { ProcessorMetrics } from '../../core/metrics.ts';
import { resolveOptions } from '../../core/options.ts';
import { ProviderError } from '../../core/provider-error.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import { providerFailure } from '../provider-failure.ts';
import type { LLMService } from '../services.ts';
import type { LLMContext } from './context.ts';

export const LLM_DEFAULTS = {
  /** Upper bound on generated tokens (the agent's advanced.llm_max_tokens). */
  maxTokens: 1024,
  temperature: undefined as number | undefined,
  /**
   * Longest wait for a response's first event (ms), from the request: past it the request is
   * ended and the turn fails `llm_timeout` (retryable), instead of the bot staying silent until
   * the visitor speaks again. Long enough for a reasoning model's first token.
   */
  firstEventTimeoutMs: 60_000,
  /**
   * Longest silence of a response once it started (ms): a stream that stalls mid-answer is ended
   * `llm_timeout` (retryable); what was said stays said. For every LLM plugin, as
   * `TTS_DEFAULTS.streamIdleMs` is for every TTS plugin.
   */
  streamIdleMs: 30_000,
} as const;

export interface LLMOptions extends ProcessorOptions {
  maxTokens?: number;
  temperature?: number;
  /** See LLM_DEFAULTS.firstEventTimeoutMs. */
  firstEventTimeoutMs?: number;
  /** See LLM_DEFAULTS.streamIdleMs. */
  streamIdleMs?: number;
}

interface PartialCall {
  id: string;
  name: string;
  args: string;
}

/** Accumulates streamed tool-call deltas into complete calls, by index. */
export class ToolCallAccumulator {
  private readonly calls = new Map<number, PartialCall>();

  add(delta: { index: number; id?: string; name?: string; argumentsDelta?: string }): void {
    const call = this.calls.get(delta.index) ?? { id: '', name: '', args: '' };
    if (delta.id) call.id = delta.id;
    if (delta.name) call.name += delta.name;
    if (delta.argumentsDelta) call.args += delta.argumentsDelta;
    this.calls.set(delta.index, call);
  }

  complete(): ToolCall[] {
    return [...this.calls.entries()]
      .sort(([a], [b]) => a - b)
      .map(([index, c]) => ({ toolCallId: c.id || `call_${index}_${randomUUID().slice(0, 8)}`, name: c.name, arguments: c.args || '{}' }));
  }

  get size(): number {
    return this.calls.size;
  }
}

export class LLMProcessor extends FrameProcessor {
  private readonly maxTokens: number;
  private readonly temperature: number | undefined;
  private readonly firstEventTimeoutMs: number;
  private readonly streamIdleMs: number;
  private readonly metrics: ProcessorMetrics;
  /** The preemptive run in flight, abortable on its own. */
  private preemptive: { readonly replyId: string; readonly abort: AbortController } | null = null;

  constructor(private readonly service: LLMService, readonly context: LLMContext, options: LLMOptions = {}) {
    super(options);
    ({ maxTokens: this.maxTokens, temperature: this.temperature, firstEventTimeoutMs: this.firstEventTimeoutMs, streamIdleMs: this.streamIdleMs } = resolveOptions(LLM_DEFAULTS, options));
    this.metrics = ProcessorMetrics.for(this.name, () => this.clock, (f) => this.push(f), () => this.startFrame?.enableMetrics ?? false, service.model);
  }

  protected override async process(f: Frame, direction: Direction, signal: AbortSignal): Promise<void> {
    switch (f.type) {
      case 'llm-messages':
        if (f.mode === 'replace') this.context.replace(f.messages);
        else for (const m of f.messages) this.context.add(m);
        if (f.run) await this.generate(signal, f.replyId);
        return;
      case 'tool-call-result':
        if (direction === 'upstream') {
          this.context.addToolResult(f.toolCallId, typeof f.result === 'string' ? f.result : JSON.stringify(f.result ?? ''));
          if (f.runLlm) await this.generate(signal);
          return;
        }
        break;
      case 'interruption':
        this.metrics.reset();
        break;
      case 'reply-decision':
        if (direction === 'downstream' && !f.use && this.preemptive?.replyId === f.replyId) this.preemptive.abort.abort();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  /** Runs one model response over the current context. */
  async generate(laneSignal: AbortSignal, replyId?: string): Promise<void> {
    const own = replyId ? new AbortController() : undefined;
    if (replyId && own) this.preemptive = { replyId, abort: own };
    const link = linkedSignal(own ? AbortSignal.any([laneSignal, own.signal]) : laneSignal);
    const responseId = randomUUID();
    try {
      await this.respond(responseId, link.signal, replyId);
    } catch (err) {
      if (isAbortError(err) || link.signal.aborted) return;
      // The provider failed (refused, unreachable, stream cut): say so clearly and close the
      // response, so what was already said is finished and recorded and the next turn works.
      this.metrics.reset();
      const failure = providerFailure('llm', err);
      this.pushError(`language model ${this.service.name} failed: ${failure.message}`, { code: failure.code, fatal: failure.fatal, cause: err });
      this.push(frame('llm-response-end', { responseId }));
    } finally {
      link.release();
      if (this.preemptive?.abort === own) this.preemptive = null;
    }
  }

  private async respond(responseId: string, signal: AbortSignal, replyId?: string): Promise<void> {
    const calls = new ToolCallAccumulator();
    this.push(frame('llm-response-start', { responseId }));
    this.metrics.startTtfb();
    this.metrics.startProcessing();
    // The turn's own signal, or the provider's silence bound: whichever comes first ends it.
    const idle = new AbortController();
    let idleTimer: TimerHandle | undefined;
    const arm = (ms: number) => {
      this.clock.clearTimeout(idleTimer);
      idleTimer = this.clock.setTimeout(() => idle.abort(), ms);
    };
    let started = false;
    const stalled = () =>
      new ProviderError(
        'timeout',
        started
          ? `the answer from ${this.service.name} sent nothing for ${this.streamIdleMs} ms mid-answer; the rest of it is lost`
          : `no answer from ${this.service.name} within ${this.firstEventTimeoutMs} ms; the request was ended`,
      );
    arm(this.firstEventTimeoutMs);
    const ended = AbortSignal.any([signal, idle.signal]);
    const events = this.service.stream({
      messages: this.context.messages(),
      tools: this.context.tools.length ? this.context.tools : undefined,
      maxTokens: this.maxTokens,
      temperature: this.temperature,
      signal: ended,
    })[Symbol.asyncIterator]();
    // A provider that does not end its stream on the signal must not hold the turn: each wait for
    // its next event is also a wait for the bound and for the turn's end.
    const idled = new Promise<'ended'>((resolve) => {
      if (ended.aborted) resolve('ended');
      else ended.addEventListener('abort', () => resolve('ended'), { once: true });
    });
    let finished = false;
    try {
      for (;;) {
        const next = await Promise.race([events.next(), idled]);
        if (next === 'ended') break;
        if (next.done) {
          finished = true;
          break;
        }
        const event = next.value;
        started = true;
        arm(this.streamIdleMs);
        if (signal.aborted) return;
        switch (event.type) {
          case 'text':
            if (!event.text) break;
            this.metrics.stopTtfb();
            this.push(frame('llm-text', { text: event.text }));
            break;
          case 'tool-call-delta':
            this.metrics.stopTtfb();
            if (replyId) {
              // Tools do things: never from a reply the user may not get. Handed back, unfinished.
              this.push(frame('reply-decision', { replyId, use: false, text: '' }), 'upstream');
              return;
            }
            calls.add(event);
            break;
          case 'usage':
            this.metrics.usage({ prompt_tokens: event.promptTokens, completion_tokens: event.completionTokens });
            break;
          case 'done':
            break;
        }
      }
    } catch (err) {
      if (idle.signal.aborted && !signal.aborted) throw stalled();
      throw err;
    } finally {
      this.clock.clearTimeout(idleTimer);
      // Left early (aborted, stalled, a preemptive reply wanting tools): end the provider's stream
      // as a for-await loop would, without waiting on a provider that ignores it.
      if (!finished) void events.return?.()?.catch(() => undefined);
    }
    if (idle.signal.aborted && !signal.aborted) throw stalled();
    if (signal.aborted) return;
    this.metrics.stopProcessing();
    if (calls.size) {
      const complete = calls.complete();
      this.context.addToolCalls(complete);
      this.push(frame('tool-calls', { responseId, calls: complete }));
    }
    this.push(frame('llm-response-end', { responseId }));
  }
}
