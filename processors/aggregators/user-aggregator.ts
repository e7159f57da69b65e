/**
 * UserTurnAggregator: decides when the user has finished a turn and hands it to the model.
 *
 * Final transcriptions between user-started and user-stopped speaking make up the turn. The turn
 * closes when the user has stopped speaking and a final transcription is in; since STT finals
 * can trail the end of speech, it waits up to `finalWaitMs` after the stop for late words.
 * When interruptions are off (the start frame's `allowInterruptions`) and the bot is speaking, the
 * finished turn is held (not dropped) and answered as soon as the bot stops.
 */
import { frame, type Direction, type Frame } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { TimerHandle } from '../../core/clock.ts';
import { resolveOptions, type OptionsFor } from '../../core/options.ts';
import type { LLMContext } from '../llm/context.ts';

export const USER_TURN_DEFAULTS = {
  /** After the user stops speaking, how long to wait for trailing final transcripts (ms). */
  finalWaitMs: 300,
} as const;

export interface UserTurnOptions extends ProcessorOptions, OptionsFor<typeof USER_TURN_DEFAULTS> {}

export class UserTurnAggregator extends FrameProcessor {
  private readonly finalWaitMs: number;
  private parts: string[] = [];
  private userSpeaking = false;
  private botSpeaking = false;
  private held: string | undefined;
  private waitTimer: TimerHandle | undefined;

  constructor(readonly context: LLMContext, options: UserTurnOptions = {}) {
    super(options);
    this.finalWaitMs = resolveOptions(USER_TURN_DEFAULTS, options).finalWaitMs;
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'user-started-speaking':
        if (direction === 'downstream') {
          this.userSpeaking = true;
          this.clock.clearTimeout(this.waitTimer);
        }
        break;
      case 'user-stopped-speaking':
        if (direction === 'downstream') {
          this.userSpeaking = false;
          this.clock.clearTimeout(this.waitTimer);
          this.waitTimer = this.clock.setTimeout(() => this.close(), this.finalWaitMs);
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
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private close(): void {
    this.clock.clearTimeout(this.waitTimer);
    this.waitTimer = undefined;
    const text = this.parts.filter(Boolean).join(' ').trim();
    this.parts = [];
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

  override cleanup(): void {
    this.clock.clearTimeout(this.waitTimer);
    super.cleanup();
  }
}
