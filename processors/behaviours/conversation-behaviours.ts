/**
 * ConversationBehaviours: the agent's manners, from its `behaviour` settings.
 *
 * - greeting: when the agent starts the conversation, it greets first;
 * - nudge: after `inactivityNudgeMs` of silence from both sides, it nudges the user once per
 *   silence (speech from either side re-arms it);
 * - farewell: when the conversation is ended from inside (the end_call tool, the duration limit),
 *   the farewell is spoken before the end;
 * - max duration: after `maxConversationMs` the farewell is spoken and the conversation ends.
 *
 * Each message has a mode: `verbatim` (say the text exactly; an empty text says nothing) or
 * `generated` (the model writes the line, guided by the text and the optional reference).
 * See docs/behaviours.md.
 */
import { frame, type Direction, type Frame } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { TimerHandle } from '../../core/clock.ts';

export type BehaviourMode = 'verbatim' | 'generated';
export const BEHAVIOUR_MODES: readonly BehaviourMode[] = ['verbatim', 'generated'];

export interface BehaviourLine {
  readonly text?: string | null;
  readonly reference?: string | null;
  readonly mode?: BehaviourMode;
}

export interface BehaviourOptions extends ProcessorOptions {
  /** Greet first (the agent's starts_conversation). */
  startsConversation?: boolean;
  greeting?: BehaviourLine;
  nudge?: BehaviourLine;
  farewell?: BehaviourLine;
  /** Silence before a nudge (ms); null/0 disables. */
  inactivityNudgeMs?: number | null;
  /** Hard stop (ms); null/0 disables. */
  maxConversationMs?: number | null;
}

/** Instruction given to the model for generated lines. */
function instruction(kind: 'greeting' | 'nudge' | 'farewell', line: BehaviourLine): string {
  const what = {
    greeting: 'Greet the user to open the conversation, in one or two short sentences.',
    nudge: 'The user has been silent for a while. Gently check whether they are still there, in one short sentence.',
    farewell: 'The conversation is ending. Say goodbye to the user, in one short sentence.',
  }[kind];
  const guide = [line.text && `Base it on: "${line.text}".`, line.reference && `Reference: ${line.reference}`].filter(Boolean).join(' ');
  return `[${kind}] ${what} ${guide}`.trim();
}

export class ConversationBehaviours extends FrameProcessor {
  private nudgeTimer: TimerHandle | undefined;
  private durationTimer: TimerHandle | undefined;
  private ending = false;
  private nudged = false;
  private userSpeaking = false;
  private botSpeaking = false;

  constructor(private readonly options: BehaviourOptions = {}) {
    super(options);
  }

  protected override onStart(): void {
    const max = this.options.maxConversationMs;
    if (max) this.durationTimer = this.clock.setTimeout(() => this.endConversation('max_duration'), max);
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'start':
        this.push(f, direction);
        if (this.options.startsConversation) this.say('greeting', this.options.greeting);
        this.armNudge();
        return;
      case 'user-started-speaking':
        this.userSpeaking = true;
        this.nudged = false;
        this.disarmNudge();
        break;
      case 'user-stopped-speaking':
        this.userSpeaking = false;
        this.armNudge();
        break;
      case 'bot-started-speaking':
        this.botSpeaking = true;
        this.disarmNudge();
        break;
      case 'bot-stopped-speaking':
        this.botSpeaking = false;
        this.armNudge();
        break;
      case 'end':
        // An end coming up from below (e.g. the end_call tool) is a request to finish: say
        // goodbye first, then let it go up to the worker, which ends after the farewell plays.
        if (direction === 'upstream') {
          if (this.ending) return;
          this.endConversation(f.reason ?? 'ended');
          return;
        }
        this.stopTimers();
        break;
      case 'cancel':
        this.stopTimers();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  /** Says the farewell (if any) and asks the worker to end the conversation after it. */
  endConversation(reason: string): void {
    if (this.ending) return;
    this.ending = true;
    this.stopTimers();
    this.say('farewell', this.options.farewell);
    this.push(frame('end', { reason }), 'upstream');
  }

  private say(kind: 'greeting' | 'nudge' | 'farewell', line: BehaviourLine | undefined): void {
    if (!line) return;
    const mode = line.mode ?? 'verbatim';
    if (mode === 'verbatim') {
      if (line.text?.trim()) this.push(frame('tts-speak', { text: line.text.trim() }));
      return;
    }
    this.push(frame('llm-messages', { messages: [{ role: 'system', content: instruction(kind, line) }], mode: 'append', run: true }));
  }

  private armNudge(): void {
    const ms = this.options.inactivityNudgeMs;
    if (!ms || this.nudged || this.ending || this.userSpeaking || this.botSpeaking) return;
    this.disarmNudge();
    this.nudgeTimer = this.clock.setTimeout(() => {
      this.nudgeTimer = undefined;
      this.nudged = true;
      this.say('nudge', this.options.nudge);
    }, ms);
  }

  private disarmNudge(): void {
    this.clock.clearTimeout(this.nudgeTimer);
    this.nudgeTimer = undefined;
  }

  private stopTimers(): void {
    this.disarmNudge();
    this.clock.clearTimeout(this.durationTimer);
    this.durationTimer = undefined;
  }

  override cleanup(): void {
    this.stopTimers();
    super.cleanup();
  }
}
