/**
 * ToolDispatcher: executes the tool calls a language model makes, whatever the LLM vendor.
 *
 * Place it right after the LLM processor. It consumes `tool-calls` frames (one per model
 * response) and forwards them downstream marked uninterruptible. Per executed call it pushes a
 * `tool-call-in-progress` frame downstream; every call of the response, executed or not, gets
 * exactly one `tool-call-result` frame pushed upstream to the LLM processor, which adds it to the
 * context (the API needs an answer for each call) and runs the model again when `runLlm` says so.
 * Results survive interruptions, so a webhook answer that arrives after the user barged in still
 * enters the context. Client-delivered calls also produce an uninterruptible `client-message`
 * frame downstream that the output transport sends to the session's client.
 *
 * `runLlm` on a result asks the context aggregator to run the model again at once. It is true
 * only on the last result of a response, and only when the agent has not started speaking in this
 * turn: no bot-started-speaking since the user last started speaking, the bot is not speaking
 * now, the user is not speaking, and the response that made the calls had no text of its own
 * (that text is speech already on its way). Otherwise the result waits in the context for the
 * next turn. The dispatcher learns all this from frames passing through it: llm-response-start
 * and llm-text (downstream, from the LLM), bot-started/stopped-speaking (upstream, from the
 * output transport), user-started/stopped-speaking and interruption.
 *
 * The built-in `end_call` asks the worker to end gracefully (an `end` frame pushed upstream) once
 * the farewell has been spoken; see HangupGate for the exact rule and how the user cancels it by
 * speaking.
 */
import type { Direction, Frame, FrameOf, ToolCall } from '../../core/frames.ts';
import { frame as makeFrame } from '../../core/frames.ts';
import { resolveOptions } from '../../core/options.ts';
import { FrameProcessor, type ProcessorOptions, type ProcessorSetup } from '../../core/processor.ts';
import { END_CALL_TOOL } from './agent-tool.ts';
import { planCalls, type DeliveredCall, type PlannedCall } from './call-plan.ts';
import { HangupGate } from './hangup-gate.ts';
import { defaultToolLogger, type ToolLogger } from './tool-logger.ts';
import type { PreparedToolset, SessionTool } from './toolset.ts';
import type { WebhookClient, WebhookSessionMetadata } from './webhook-client.ts';
import { WebhookRefusedError } from './webhook-target.ts';

export const TOOL_DISPATCH_DEFAULTS = {
  /** Spec limit: calls executed per model response; later calls are answered without delivery. */
  maxCallsPerResponse: 3,
  /** How long `end_call` waits for a farewell that was said but never started playing. */
  farewellTimeoutMs: 15_000,
  /** Result of a call that gets no answer (client delivery, webhook without wait_for_response). */
  acknowledgement: 'The request was sent. No result will be returned for this call.',
  /** Result of `end_call`. */
  endCallResult: 'The call will end once your farewell has been spoken. If the user speaks again first, the call stays open: answer them.',
  /**
   * Times tool results may run the model again within one user turn. A model that keeps calling
   * tools (the same collapsed call, an unknown tool) would otherwise loop without end.
   */
  maxToolRoundsPerTurn: 5,
  /** Result of any call in `third_party` mode (never dispatched). */
  thirdPartyResult: 'Not executed: tools are not dispatched for this agent.',
  /** Reason carried by the upstream end frame `end_call` produces. */
  endCallReason: 'end_call',
  /**
   * Longest tool result (characters) that enters the model's context; a longer one is cut there,
   * with a note saying so. A result stays in the context for the rest of the session and is sent
   * with every later request: a webhook answering 1 MiB (its size limit) would otherwise put every
   * later turn over the model's context window, or make each one costly.
   */
  maxResultChars: 16_000,
} as const;

export interface ToolDispatcherOptions extends ProcessorOptions {
  readonly toolset: PreparedToolset;
  readonly webhooks: WebhookClient;
  /** Session fields sent with every webhook call. */
  readonly session: WebhookSessionMetadata;
  readonly logger?: ToolLogger;
  readonly maxCallsPerResponse?: number;
  readonly farewellTimeoutMs?: number;
  readonly maxToolRoundsPerTurn?: number;
  /** See TOOL_DISPATCH_DEFAULTS.maxResultChars. */
  readonly maxResultChars?: number;
}

/** What one model response's calls share while their results come in. */
interface Batch {
  readonly responseId: string;
  readonly turn: number;
  readonly responseHadText: boolean;
  readonly endCall: boolean;
  pending: number;
}

type Outcome = { readonly result: unknown; readonly isError: boolean };

export class ToolDispatcher extends FrameProcessor {
  private readonly toolset: PreparedToolset;
  private readonly webhooks: WebhookClient;
  private readonly session: WebhookSessionMetadata;
  private readonly logger: ToolLogger;
  private readonly maxCalls: number;
  private readonly farewellTimeoutMs: number;
  private readonly maxRounds: number;
  private readonly maxResultChars: number;
  /** Tools still dispatchable; a webhook refused at call time leaves for the rest of the session. */
  private readonly tools: Map<string, SessionTool>;
  private gate: HangupGate;
  private readonly lifetime = new AbortController();

  private turn = 0;
  private lastDelivered: DeliveredCall | undefined;
  private responseHadText = false;
  private botSpeaking = false;
  private botSpokeThisTurn = false;
  private userSpeaking = false;
  private roundsThisTurn = 0;

  constructor(options: ToolDispatcherOptions) {
    super(options);
    this.toolset = options.toolset;
    this.webhooks = options.webhooks;
    this.session = options.session;
    this.logger = options.logger ?? defaultToolLogger();
    const settings = resolveOptions(TOOL_DISPATCH_DEFAULTS, options);
    this.maxCalls = settings.maxCallsPerResponse;
    this.farewellTimeoutMs = settings.farewellTimeoutMs;
    this.maxRounds = settings.maxToolRoundsPerTurn;
    this.maxResultChars = settings.maxResultChars;
    this.tools = new Map(options.toolset.tools);
    this.gate = this.makeGate();
  }

  override setup(setup: ProcessorSetup): void {
    super.setup(setup);
    this.gate.dispose();
    this.gate = this.makeGate();
  }

  override cleanup(): void {
    this.stopAll();
    super.cleanup();
  }

  protected override onEnd(): void {
    this.stopAll();
  }

  protected override onCancel(): void {
    this.stopAll();
  }

  protected override process(frame: Frame, direction: Direction): void {
    switch (frame.type) {
      case 'tool-calls':
        if (direction === 'downstream') return this.dispatchCalls(frame);
        break;
      case 'llm-response-start':
        this.responseHadText = false;
        break;
      case 'llm-text':
        if (frame.text.trim() !== '') this.responseHadText = true;
        break;
      case 'bot-started-speaking':
        this.botSpeaking = true;
        this.botSpokeThisTurn = true;
        this.gate.botStartedSpeaking();
        break;
      case 'bot-stopped-speaking':
        this.botSpeaking = false;
        this.gate.botStoppedSpeaking();
        break;
      case 'user-started-speaking':
        this.userSpeaking = true;
        this.turn++;
        this.botSpokeThisTurn = false;
        this.lastDelivered = undefined;
        this.roundsThisTurn = 0;
        this.keepCallOpen('the user started speaking');
        break;
      case 'user-stopped-speaking':
        this.userSpeaking = false;
        break;
      case 'interruption':
        this.keepCallOpen('the bot was interrupted');
        break;
      default:
        break;
    }
    this.push(frame, direction);
  }

  private dispatchCalls(calls: FrameOf<'tool-calls'>): void {
    const list: readonly ToolCall[] = Array.isArray(calls.calls) ? calls.calls : [];
    // Forwarded uninterruptible: the results below survive interruptions, so must the calls.
    this.push(makeFrame('tool-calls', { responseId: calls.responseId, calls: calls.calls }, { uninterruptible: true }));
    if (this.toolset.mode === 'third_party') {
      this.logger.info({ responseId: calls.responseId, calls: list.length }, 'tool calls ignored: third_party agents never dispatch tools');
      for (const call of list) this.pushResult(call, { result: TOOL_DISPATCH_DEFAULTS.thirdPartyResult, isError: true }, false);
      return;
    }

    const plan = planCalls(list, this.tools, this.lastDelivered, this.maxCalls);
    this.lastDelivered = plan.lastDelivered;
    const executed = plan.calls.filter((p): p is Extract<PlannedCall, { kind: 'execute' }> => p.kind === 'execute');
    const batch: Batch = {
      responseId: calls.responseId,
      turn: this.turn,
      responseHadText: this.responseHadText,
      endCall: executed.some((p) => p.tool.delivery.mode === 'end_call'),
      pending: 0,
    };

    const immediate: [ToolCall, Outcome][] = [];
    for (const planned of plan.calls) {
      const { call } = planned;
      switch (planned.kind) {
        case 'execute':
          this.push(makeFrame('tool-call-in-progress', { ...call }));
          this.execute(planned, batch, immediate);
          break;
        case 'duplicate':
          immediate.push([call, { result: `Same call as ${planned.of}, which was already delivered; it was not repeated.`, isError: false }]);
          break;
        case 'over-limit':
          immediate.push([call, { result: `Not executed: at most ${this.maxCalls} tool calls are executed per response. Answer the user with speech now.`, isError: true }]);
          break;
        case 'unknown':
          immediate.push([call, { result: `No tool named "${call.name}" is available.`, isError: true }]);
          break;
        case 'invalid-arguments':
          immediate.push([call, { result: `Tool "${call.name}" was not called: ${planned.reason}.`, isError: true }]);
          break;
      }
    }
    immediate.forEach(([call, outcome], i) => {
      const last = i === immediate.length - 1 && batch.pending === 0;
      this.pushResult(call, outcome, last && this.mayRunLlm(batch));
    });
    if (batch.endCall) this.gate.arm({ responseHadText: batch.responseHadText, botSpeaking: this.botSpeaking });
  }

  private execute(planned: Extract<PlannedCall, { kind: 'execute' }>, batch: Batch, immediate: [ToolCall, Outcome][]): void {
    const { call, tool, args } = planned;
    const delivery = tool.delivery;
    switch (delivery.mode) {
      case 'end_call':
        immediate.push([call, { result: TOOL_DISPATCH_DEFAULTS.endCallResult, isError: false }]);
        return;
      case 'client':
        this.push(
          makeFrame(
            'client-message',
            { message: { type: 'tool-call', function_name: call.name, tool_call_id: call.toolCallId, arguments: args } },
            { uninterruptible: true },
          ),
        );
        immediate.push([call, { result: TOOL_DISPATCH_DEFAULTS.acknowledgement, isError: false }]);
        return;
      case 'webhook':
        batch.pending++;
        void this.callWebhook(call, delivery.url, delivery.waitForResponse).then((outcome) => {
          batch.pending--;
          if (outcome && !this.lifetime.signal.aborted) this.pushResult(call, outcome, batch.pending === 0 && this.mayRunLlm(batch));
        });
        return;
    }
  }

  /** Resolves to the call's outcome, or undefined when the session ended first. */
  private async callWebhook(call: ToolCall, url: string, waitForResponse: boolean): Promise<Outcome | undefined> {
    let target;
    try {
      target = await this.webhooks.resolve(url);
    } catch (err) {
      if (!(err instanceof WebhookRefusedError)) {
        this.logger.warn({ tool: call.name, reason: String(err) }, 'webhook target could not be checked');
        return { result: `Tool "${call.name}" failed: its webhook address could not be checked.`, isError: true };
      }
      if (err.code === 'unresolvable_host') {
        this.logger.warn({ tool: call.name, code: err.code, reason: err.message }, 'webhook host does not resolve');
        return { result: `Tool "${call.name}" failed: its webhook host could not be resolved.`, isError: true };
      }
      this.tools.delete(call.name);
      this.logger.warn({ tool: call.name, code: err.code, reason: err.message }, `tool ${call.name} dropped for this session: webhook URL refused`);
      return { result: `Tool "${call.name}" is unavailable: its webhook address is not allowed.`, isError: true };
    }
    const request = {
      name: call.name,
      toolCallId: call.toolCallId,
      arguments: call.arguments,
      responseRequired: waitForResponse,
      metadata: this.session,
    };
    if (!waitForResponse) {
      // Not tied to the session: its end must not cut the delivery short (a lead saved with the
      // goodbye's end_call, whose hang-up comes at once). Bounded by the webhook timeout (30 s).
      void this.webhooks.send(target, request).then((o) => {
        if (!o.ok) this.logger.warn({ tool: call.name, toolCallId: call.toolCallId, code: o.code }, `fire-and-forget webhook failed: ${o.error}`);
      });
      return { result: TOOL_DISPATCH_DEFAULTS.acknowledgement, isError: false };
    }
    const outcome = await this.webhooks.send(target, request, this.lifetime.signal);
    if (outcome.ok) return { result: this.bounded(call, outcome.result), isError: false };
    if (outcome.code === 'aborted') return undefined;
    this.logger.warn({ tool: call.name, toolCallId: call.toolCallId, code: outcome.code, status: outcome.status }, outcome.error);
    return { result: `Tool "${call.name}" failed: ${outcome.error}.`, isError: true };
  }

  /**
   * The result as it enters the context (there as text: a string, or its JSON): at most
   * `maxResultChars`; a longer one becomes its first `maxResultChars` characters and a note.
   */
  private bounded(call: ToolCall, result: unknown): unknown {
    const text = typeof result === 'string' ? result : JSON.stringify(result ?? '');
    if (text.length <= this.maxResultChars) return result;
    this.logger.warn({ tool: call.name, toolCallId: call.toolCallId, chars: text.length, kept: this.maxResultChars }, 'tool result cut to its limit before entering the context');
    return `${text.slice(0, this.maxResultChars)}\n[The tool's result was ${text.length} characters long; only the first ${this.maxResultChars} are shown.]`;
  }

  /** Decides `runLlm` for the last result of a batch (see the file comment). */
  private mayRunLlm(batch: Batch): boolean {
    const silentTurn =
      !batch.endCall &&
      !this.gate.hungUp &&
      batch.turn === this.turn &&
      !batch.responseHadText &&
      !this.botSpokeThisTurn &&
      !this.botSpeaking &&
      !this.userSpeaking;
    if (!silentTurn) return false;
    if (this.roundsThisTurn >= this.maxRounds) {
      this.logger.warn({ responseId: batch.responseId, rounds: this.roundsThisTurn }, 'tool rounds limit reached: the result waits for the next user turn');
      return false;
    }
    this.roundsThisTurn++;
    return true;
  }

  private pushResult(call: ToolCall, outcome: Outcome, runLlm: boolean): void {
    // Upstream: the LLM processor above owns the context and runs the model when asked to.
    this.push(makeFrame('tool-call-result', { ...call, result: outcome.result, isError: outcome.isError, runLlm }), 'upstream');
  }

  private keepCallOpen(why: string): void {
    if (this.gate.userSpoke()) this.logger.info({ tool: END_CALL_TOOL }, `hang-up cancelled: ${why} before the farewell ended`);
  }

  private makeGate(): HangupGate {
    return new HangupGate(this.clock, this.farewellTimeoutMs, () => {
      this.logger.info({ tool: END_CALL_TOOL }, 'ending the conversation after the farewell');
      this.push(makeFrame('end', { reason: TOOL_DISPATCH_DEFAULTS.endCallReason }), 'upstream');
    });
  }

  private stopAll(): void {
    this.lifetime.abort();
    this.gate.dispose();
  }
}
