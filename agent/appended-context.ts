/**
 * How much system context a page may append to one session (`append-system-context`). Every
 * appended text stays in the history the model is sent on every later turn (and a paid model
 * bills it again each turn), so without a bound one page could grow a session's memory and cost
 * without end: 1,440 messages of 4,000 characters grew the heap by 11 MB, measured (issue 32).
 *
 * Beyond the limits the message is refused with a non-fatal session `error` (`context_limit`)
 * rather than the oldest text dropped: what was appended may already have shaped answers, a
 * speech-to-speech provider keeps its own copy that cannot be taken back, and the page learns
 * that its text was not used. Documented in docs/session-messages.md.
 */
import type { BotMessage } from '../protocol/session-messages.ts';

export const APPENDED_CONTEXT_LIMITS = {
  /** Appended texts per session: a page updating what the visitor does, a few times a minute. */
  maxMessages: 64,
  /** Their total length (characters): about 8,000 tokens on top of the system prompt. */
  maxTotalCharacters: 32_000,
} as const;

export class AppendedContextBudget {
  private messages = 0;
  private characters = 0;

  constructor(private readonly limits: { readonly maxMessages: number; readonly maxTotalCharacters: number } = APPENDED_CONTEXT_LIMITS) {}

  /** Counts `text` in and returns null, or returns the error to send when it does not fit. */
  admit(text: string): Extract<BotMessage, { type: 'error' }> | null {
    const { maxMessages, maxTotalCharacters } = this.limits;
    const why = this.messages >= maxMessages
      ? `this session already has ${maxMessages} appended system context messages`
      : this.characters + text.length > maxTotalCharacters
        ? `appended system context is limited to ${maxTotalCharacters} characters per session (${this.characters} used)`
        : null;
    if (why) return { type: 'error', code: 'context_limit', message: `${why}; this text was not added`, fatal: false };
    this.messages++;
    this.characters += text.length;
    return null;
  }
}
