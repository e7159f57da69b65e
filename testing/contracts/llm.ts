/**
 * The language-model contract (processors/services.ts `LLMService`) as checks any LLM plugin,
 * ours or a third party's, runs against itself (pointed at its vendor or at a fake of it).
 */
import type { LLMMessage } from '../../core/frames.ts';
import type { LLMEvent, LLMRequest, LLMService, ToolDefinition } from '../../processors/services.ts';
import { CONTRACT_DEFAULTS, describe, ensure, ensureAuthFailure, isAbort, within, type ContractCheck } from './check.ts';

export interface LLMContractSubject {
  create(): LLMService | Promise<LLMService>;
  /** A conversation the model answers with text (default: a system line and a greeting). */
  readonly messages?: readonly LLMMessage[];
  /**
   * A request the model answers with a call of `tool.name` (the fake or the prompt decides);
   * leaves out the tool check when absent.
   */
  readonly toolCall?: { readonly messages: readonly LLMMessage[]; readonly tool: ToolDefinition };
  readonly refused?: () => LLMService | Promise<LLMService>;
  readonly timeoutMs?: number;
}

const DEFAULT_MESSAGES: readonly LLMMessage[] = [
  { role: 'system', content: 'You are a helpful assistant. Answer in one sentence.' },
  { role: 'user', content: 'Hello, who are you?' },
];

async function collect(service: LLMService, request: LLMRequest, timeoutMs: number): Promise<LLMEvent[]> {
  const events: LLMEvent[] = [];
  await within(
    (async () => {
      for await (const e of service.stream(request)) events.push(e);
    })(),
    timeoutMs,
    `${service.name}: the whole response`,
  );
  return events;
}

export function llmContract(subject: LLMContractSubject): ContractCheck[] {
  const timeoutMs = subject.timeoutMs ?? CONTRACT_DEFAULTS.timeoutMs;
  const messages = subject.messages ?? DEFAULT_MESSAGES;
  const checks: ContractCheck[] = [
    {
      name: 'llm: streams text, then one done event, last',
      async run() {
        const service = await subject.create();
        const events = await collect(service, { messages }, timeoutMs);
        const text = events.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('');
        ensure(text.trim().length > 0, `${service.name}: no text in ${JSON.stringify(events)}`);
        const dones = events.filter((e) => e.type === 'done');
        ensure(dones.length === 1, `${service.name}: ${dones.length} done events`);
        ensure(events.at(-1)?.type === 'done', `${service.name}: done is not the last event`);
        for (const e of events) if (e.type === 'usage') ensure(e.promptTokens >= 0 && e.completionTokens >= 0, `${service.name}: negative usage`);
      },
    },
    {
      name: 'llm: an abort mid-stream stops the stream with an abort, not a provider error',
      async run() {
        const service = await subject.create();
        const controller = new AbortController();
        const events: LLMEvent[] = [];
        let failure: unknown;
        try {
          await within(
            (async () => {
              for await (const e of service.stream({ messages, signal: controller.signal })) {
                events.push(e);
                if (e.type === 'text') controller.abort();
              }
            })(),
            timeoutMs,
            `${service.name}: the stream to stop after abort`,
          );
        } catch (err) {
          failure = err;
        }
        ensure(controller.signal.aborted, `${service.name}: no text arrived to abort after`);
        ensure(failure !== undefined, `${service.name}: the stream ended normally after an abort`);
        ensure(isAbort(failure, controller.signal), `${service.name}: an abort surfaced as ${describe(failure)}`);
        ensure(!events.some((e) => e.type === 'done'), `${service.name}: a done event after abort`);
      },
    },
    {
      name: 'llm: an already aborted request yields no text',
      async run() {
        const service = await subject.create();
        const controller = new AbortController();
        controller.abort();
        const events: LLMEvent[] = [];
        let failure: unknown;
        try {
          for await (const e of service.stream({ messages, signal: controller.signal })) events.push(e);
        } catch (err) {
          failure = err;
        }
        ensure(!events.some((e) => e.type === 'text'), `${service.name}: text after the request was aborted`);
        ensure(failure === undefined || isAbort(failure, controller.signal), `${service.name}: an abort surfaced as ${describe(failure)}`);
      },
    },
  ];
  if (subject.toolCall) {
    const { messages: toolMessages, tool } = subject.toolCall;
    checks.push({
      name: 'llm: tool-call deltas assemble into a call with an id, the tool name and JSON arguments',
      async run() {
        const service = await subject.create();
        const events = await collect(service, { messages: toolMessages, tools: [tool] }, timeoutMs);
        const calls = new Map<number, { id: string; name: string; args: string }>();
        for (const e of events) {
          if (e.type !== 'tool-call-delta') continue;
          const call = calls.get(e.index) ?? { id: '', name: '', args: '' };
          calls.set(e.index, { id: e.id ?? call.id, name: call.name + (e.name ?? ''), args: call.args + (e.argumentsDelta ?? '') });
        }
        const call = [...calls.values()].find((c) => c.name === tool.name);
        ensure(call, `${service.name}: no call of ${tool.name} in ${JSON.stringify(events)}`);
        ensure(call.id.length > 0, `${service.name}: the call has no id`);
        let parsed: unknown;
        try {
          parsed = JSON.parse(call.args || '{}');
        } catch {
          ensure(false, `${service.name}: arguments are not JSON: ${call.args}`);
        }
        ensure(typeof parsed === 'object' && parsed !== null, `${service.name}: arguments are not an object`);
        ensure(events.at(-1)?.type === 'done', `${service.name}: done is not the last event`);
      },
    });
  }
  if (subject.refused) {
    const refused = subject.refused;
    checks.push({
      name: 'llm: a refused key fails with ProviderError auth_failed, not retryable',
      async run() {
        const service = await refused();
        let failure: unknown;
        try {
          await collect(service, { messages }, timeoutMs);
        } catch (err) {
          failure = err;
        }
        ensure(failure !== undefined, `${service.name}: a refused key was accepted`);
        ensureAuthFailure(failure, service.name);
      },
    });
  }
  return checks;
}
