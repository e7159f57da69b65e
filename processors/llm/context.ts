/**
 * LLMContext: the conversation as the model sees it: the system prompt (plus a suffix pinning
 * the response language), then the history of user, assistant and tool messages. Shared by the
 * user aggregator (adds what the user said), the LLM processor (reads it, adds tool calls) and
 * the assistant aggregator (adds what the bot actually said).
 */
import type { LLMMessage, ToolCall } from '../../core/frames.ts';
import type { ToolDefinition } from '../services.ts';

/** Language names for the pin suffix; codes not listed are named by their code. */
const LANGUAGE_NAMES: Readonly<Record<string, string>> = {
  en: 'English', fr: 'French', de: 'German', es: 'Spanish', it: 'Italian', pt: 'Portuguese', nl: 'Dutch',
  pl: 'Polish', sv: 'Swedish', da: 'Danish', no: 'Norwegian', fi: 'Finnish', cs: 'Czech', ro: 'Romanian',
  hu: 'Hungarian', el: 'Greek', tr: 'Turkish', ru: 'Russian', uk: 'Ukrainian', ar: 'Arabic', he: 'Hebrew',
  hi: 'Hindi', ja: 'Japanese', ko: 'Korean', zh: 'Chinese', id: 'Indonesian', vi: 'Vietnamese', th: 'Thai',
};

export function languageName(code: string): string {
  const base = code.toLowerCase().split(/[-_]/)[0]!;
  return LANGUAGE_NAMES[base] ?? code;
}

/** The suffix appended to the system prompt so the model answers in the agent's language. */
export function languagePin(code: string): string {
  return `Always respond in ${languageName(code)} (language code "${code}"), whatever language the user writes in.`;
}

export interface LLMContextOptions {
  systemPrompt?: string | null;
  language?: string;
  tools?: readonly ToolDefinition[];
}

export class LLMContext {
  private readonly history: LLMMessage[] = [];
  private systemPrompt: string;
  private language: string | undefined;
  tools: readonly ToolDefinition[];

  constructor(options: LLMContextOptions = {}) {
    this.systemPrompt = options.systemPrompt ?? '';
    this.language = options.language;
    this.tools = options.tools ?? [];
  }

  /** The system message: the owner's prompt, then the language pin. */
  get system(): string {
    const pin = this.language ? languagePin(this.language) : '';
    return [this.systemPrompt.trim(), pin].filter(Boolean).join('\n\n');
  }

  setSystemPrompt(prompt: string | null | undefined): void {
    this.systemPrompt = prompt ?? '';
  }

  /**
   * Messages to send: system first, then history. A tool call still running (a webhook the agent
   * waits for while the conversation moved on) is answered with `PENDING_TOOL_RESULT` in the
   * request only: chat APIs refuse a history in which a call has no answer right after it.
   */
  messages(): LLMMessage[] {
    const system = this.system;
    const history = withPendingResults(this.history);
    return system ? [{ role: 'system', content: system }, ...history] : history;
  }

  get length(): number {
    return this.history.length;
  }

  last(): LLMMessage | undefined {
    return this.history[this.history.length - 1];
  }

  add(message: LLMMessage): void {
    this.history.push(message);
  }

  /** Removes one message (by identity), e.g. the words of a preemptive reply the user went on from. */
  remove(message: LLMMessage): boolean {
    const at = this.history.lastIndexOf(message);
    if (at < 0) return false;
    this.history.splice(at, 1);
    return true;
  }

  addUser(text: string): void {
    this.history.push({ role: 'user', content: text });
  }

  addAssistant(text: string): void {
    if (!text.trim()) return;
    // Text spoken in a response that also called tools belongs to that tool-call message: the
    // API requires tool results to follow their call directly, with nothing in between.
    for (let i = this.history.length - 1; i >= 0; i--) {
      const m = this.history[i]!;
      if (m.role === 'tool') continue;
      if (m.role === 'assistant' && m.toolCalls?.length && m.content === null) {
        this.history[i] = { ...m, content: text };
        return;
      }
      break;
    }
    this.history.push({ role: 'assistant', content: text });
  }

  /** Extra system context for later turns (e.g. the widget's appendSystemContext()). */
  addSystemContext(text: string): void {
    this.history.push({ role: 'system', content: text });
  }

  addToolCalls(calls: readonly ToolCall[]): void {
    this.history.push({ role: 'assistant', content: null, toolCalls: calls });
  }

  /**
   * A result goes right after its call (and that call's other results), even when it arrives late,
   * after the user spoke again: that is where the API expects it, and the next run sees it.
   */
  addToolResult(toolCallId: string, content: string): void {
    const call = this.history.findLastIndex((m) => m.role === 'assistant' && m.toolCalls?.some((c) => c.toolCallId === toolCallId));
    let at = call < 0 ? this.history.length : call + 1;
    while (call >= 0 && this.history[at]?.role === 'tool') at++;
    this.history.splice(at, 0, { role: 'tool', toolCallId, content });
  }

  /** Replaces the history; a leading system message becomes the system prompt. */
  replace(messages: readonly LLMMessage[]): void {
    this.history.length = 0;
    let rest = messages;
    if (messages[0]?.role === 'system') {
      this.systemPrompt = messages[0].content ?? '';
      rest = messages.slice(1);
    }
    this.history.push(...rest);
  }
}

/** What a request says for a tool call whose result has not arrived yet. */
export const PENDING_TOOL_RESULT = 'No result yet: this call is still running. Its result will be added to the conversation when it arrives.';

function withPendingResults(history: readonly LLMMessage[]): LLMMessage[] {
  const out: LLMMessage[] = [];
  for (let i = 0; i < history.length; i++) {
    const m = history[i]!;
    out.push(m);
    if (m.role !== 'assistant' || !m.toolCalls?.length) continue;
    const answered = new Set<string>();
    while (history[i + 1]?.role === 'tool') {
      const result = history[++i]!;
      if (result.toolCallId) answered.add(result.toolCallId);
      out.push(result);
    }
    for (const c of m.toolCalls) if (!answered.has(c.toolCallId)) out.push({ role: 'tool', toolCallId: c.toolCallId, content: PENDING_TOOL_RESULT });
  }
  return out;
}
