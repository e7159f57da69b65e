/**
 * UserTurnAggregator: decides when the user has finished a turn and hands it to the model.
 *
 * Final transcriptions between user-started and user-stopped speaking make up the turn. The turn
 * closes when the user has stopped speaking and a final transcription is in; since STT finals
 * can trail the end of speech, it waits up to `finalWaitMs` after the stop for late words.
 * When interruptions are off (the start frame's `allowInterruptions`) and the bot is speaking, the
 * finished turn is held (not dropped) and answered as soon as the bot stops.
 *
 * Preemptive replies. While the turn processor waits on an undecided pause (`user-turn-pending`),
 * the words so far are put in the context and the model is run at once (`llm-messages` with a
 * `replyId`, between `reply-start` / `reply-end` markers): the reply gate after the TTS holds what
 * it makes. When the turn ends with the same words, the reply is used (`reply-decision` `use`:
 * its audio plays at once). When the user goes on (speech), or other words came, it is
 * discarded: its user message leaves the context, its held frames are dropped, its LLM and TTS
 * work is aborted; the turn is then answered as usual. The model's tool calls never run from a
 * preemptive reply: the LLM hands such a reply back (`reply-decision` upstream, `use: false`) and
 * the turn is answered normally when it ends.
 */
import { randomUUID } from 'node:crypto';
import { frame, type Direction, type Frame, type LLMMessage } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { TimerHandle } from '../../core/clock.ts';
import { resolveOptions, type OptionsFor } from '../../core/options.ts';
import type { LLMContext } from '../llm/context.ts';

export const USER_TURN_DEFAULTS = {
  /** After the user stops speaking, how long to wait for trailing final transcripts (ms). */
  finalWaitMs: 300,
} as const;

export interface UserTurnOptions extends ProcessorOptions, OptionsFor<typeof USER_TURN_DEFAULTS> {}

/** Preemptive replies of one session: started, used (played), discarded. */
export interface PreemptiveStats {
  started: number;
  used: number;
  discarded: number;
}

interface Provisional {
  readonly replyId: string;
  readonly text: string;
  readonly message: LLMMessage;
}

export class UserTurnAggregator extends FrameProcessor {
  private readonly finalWaitMs: number;
  private parts: string[] = [];
  private userSpeaking = false;
  private botSpeaking = false;
  private held: string | undefined;
  private waitTimer: TimerHandle | undefined;
  private provisional: Provisional | null = null;
  /** Words a preemptive reply could not be made from (the model wanted tools): not tried again. */
  private notPreemptible: string | null = null;
  readonly preemptive: PreemptiveStats = { started: 0, used: 0, discarded: 0 };
  /** Speech since the last final: the words so far miss its end (the STT finalizes each pause). */
  private wordsBehind = false;

  constructor(readonly context: LLMContext, options: UserTurnOptions = {}) {
    super(options);
    this.finalWaitMs = resolveOptions(USER_TURN_DEFAULTS, options).finalWaitMs;
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'user-started-speaking':
        if (direction === 'downstream') {
          this.userSpeaking = true;
          this.notPreemptible = null;
          this.clock.clearTimeout(this.waitTimer);
        }
        break;
      case 'user-stopped-speaking':
        if (direction === 'downstream') {
          this.userSpeaking = false;
          this.clock.clearTimeout(this.waitTimer);
          // The words of the last speech are in (the STT finalized the pause before the turn
          // ended), or the reply made from these very words is ready: no wait for late finals.
          if ((!this.wordsBehind && this.text()) || (this.provisional && this.provisional.text === this.text())) {
            this.push(f, direction);
            this.close();
            return;
          }
          this.waitTimer = this.clock.setTimeout(() => this.close(), this.finalWaitMs);
        }
        break;
      case 'vad-speech-stopped':
        // The STT finalizes each pause: the words of the speech just ended are still to come.
        if (direction === 'downstream') this.wordsBehind = true;
        break;
      case 'vad-speech-started':
        // The user goes on: the reply started on the pause is not what they will be answered.
        if (direction === 'downstream') {
          this.wordsBehind = true;
          this.discardProvisional();
        }
        break;
      case 'user-turn-pending':
        this.push(f, direction);
        if (direction === 'downstream') this.startProvisional();
        return;
      case 'reply-decision':
        // From the LLM (upstream): this reply cannot be used (the model called tools).
        if (direction === 'upstream' && !f.use && this.provisional?.replyId === f.replyId) {
          this.notPreemptible = this.provisional.text;
          this.discardProvisional();
          return;
        }
        break;
      case 'bot-started-speaking':
        this.botSpeaking = true;
        break;
      case 'bot-stopped-speaking':
        this.botSpeaking = false;
        if (this.held !== undefined) {
          const text = this.held;
          this.held = undefined;
          this.push(f, direction);
          this.commit(text);
          return;
        }
        break;
      case 'transcription':
        this.push(f, direction);
        if (f.final) {
          this.wordsBehind = false;
          this.parts.push(f.text.trim());
          // A final arriving after the user stopped is the trailing piece of that turn (or a
          // turn the VAD missed): close it now rather than wait.
          if (!this.userSpeaking) this.close();
        }
        return;
      case 'interruption':
      case 'cancel':
        this.clock.clearTimeout(this.waitTimer);
        this.waitTimer = undefined;
        if (this.provisional) this.dropProvisional();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  /**
   * The turn's words. A final that trails off (`What can you…`, as the offline STT writes the
   * beginning of a phrase, or a provider's `...`) and is followed by more words loses its
   * ellipsis: the words go on (`What can you do?`).
   */
  private text(): string {
    const parts = this.parts.filter(Boolean);
    return parts
      .map((part, i) => (i < parts.length - 1 ? part.replace(/\s*(?:\.\.\.|…)$/u, '') : part))
      .join(' ')
      .trim();
  }

  private close(): void {
    this.clock.clearTimeout(this.waitTimer);
    this.waitTimer = undefined;
    const text = this.text();
    this.parts = [];
    const provisional = this.provisional;
    if (provisional && provisional.text === text) {
      // The preemptive reply answers exactly what was said: it plays now.
      this.provisional = null;
      this.preemptive.used++;
      this.push(frame('reply-decision', { replyId: provisional.replyId, use: true, text }));
      this.push(frame('client-message', { message: { type: 'transcript-turn', owner: 'user', text } }));
      return;
    }
    this.discardProvisional();
    if (!text) return;
    if (this.botSpeaking && !this.interruptionsAllowed) {
      this.held = this.held ? `${this.held} ${text}` : text;
      return;
    }
    this.commit(text);
  }

  private commit(text: string): void {
    this.context.addUser(text);
    this.push(frame('client-message', { message: { type: 'transcript-turn', owner: 'user', text } }));
    this.push(frame('llm-messages', { messages: [], mode: 'append', run: true }));
  }

  /** Runs the model on the words so far, its reply held by the reply gate until the turn ends. */
  private startProvisional(): void {
    const text = this.text();
    if (this.provisional?.text === text || !/[\p{L}\p{N}]/u.test(text.replace(/\[[^\]]*\]/g, ''))) return;
    // Not before the words of the latest speech are in, nor over the bot.
    if (text === this.notPreemptible || this.botSpeaking || this.wordsBehind) return;
    this.discardProvisional();
    const replyId = randomUUID();
    const message: LLMMessage = { role: 'user', content: text };
    this.context.add(message);
    this.provisional = { replyId, text, message };
    this.preemptive.started++;
    this.push(frame('reply-start', { replyId }));
    this.push(frame('llm-messages', { messages: [], mode: 'append', run: true, replyId }));
    this.push(frame('reply-end', { replyId }));
  }

  private discardProvisional(): void {
    const provisional = this.provisional;
    if (!provisional) return;
    this.dropProvisional();
    this.push(frame('reply-decision', { replyId: provisional.replyId, use: false, text: provisional.text }));
  }

  /** Forgets the preemptive reply: its words leave the context (they may come back with the turn). */
  private dropProvisional(): void {
    const provisional = this.provisional!;
    this.provisional = null;
    this.preemptive.discarded++;
    this.context.remove(provisional.message);
  }

  override cleanup(): void {
    this.clock.clearTimeout(this.waitTimer);
    super.cleanup();
  }
}
