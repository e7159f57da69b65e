/**
 * When the built-in `end_call` tool runs, the call must end after the farewell, and must not end
 * if the user speaks again before that. The gate holds the hang-up until it is safe:
 *
 * - the response that called `end_call` had no spoken text and the bot is silent: hang up now;
 * - the bot is speaking: hang up when it stops (bot-stopped-speaking);
 * - the response had text the bot has not started to say: wait for it to start, then to stop;
 *   if it never starts within `farewellTimeoutMs` (say, the TTS failed) hang up anyway.
 *
 * The user starting to speak (or an interruption) while the gate waits disarms it: the
 * conversation goes on. Hanging up is requested once, by the `hangUp` callback; the graceful end
 * frame it leads to drains behind whatever farewell audio is still queued, so a gap between two
 * farewell sentences cannot cut the last one off.
 */
import type { Clock, TimerHandle } from '../../core/clock.ts';

type GateState = 'idle' | 'awaiting-speech' | 'awaiting-silence' | 'done';

export class HangupGate {
  private state: GateState = 'idle';
  private timer: TimerHandle | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly farewellTimeoutMs: number,
    private readonly hangUp: () => void,
  ) {}

  get armed(): boolean {
    return this.state === 'awaiting-speech' || this.state === 'awaiting-silence';
  }

  get hungUp(): boolean {
    return this.state === 'done';
  }

  arm(farewell: { readonly responseHadText: boolean; readonly botSpeaking: boolean }): void {
    if (this.state === 'done') return;
    if (farewell.botSpeaking) {
      this.state = 'awaiting-silence';
    } else if (farewell.responseHadText) {
      this.state = 'awaiting-speech';
      this.clock.clearTimeout(this.timer);
      this.timer = this.clock.setTimeout(() => {
        if (this.state === 'awaiting-speech') this.fire();
      }, this.farewellTimeoutMs);
    } else {
      this.fire();
    }
  }

  botStartedSpeaking(): void {
    if (this.state !== 'awaiting-speech') return;
    this.clock.clearTimeout(this.timer);
    this.state = 'awaiting-silence';
  }

  botStoppedSpeaking(): void {
    if (this.state === 'awaiting-silence') this.fire();
  }

  /** The user spoke (or interrupted) before the hang-up: keep the conversation open. Returns whether it disarmed. */
  userSpoke(): boolean {
    if (!this.armed) return false;
    this.reset('idle');
    return true;
  }

  dispose(): void {
    this.reset(this.state === 'done' ? 'done' : 'idle');
  }

  private fire(): void {
    this.reset('done');
    this.hangUp();
  }

  private reset(state: GateState): void {
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.state = state;
  }
}
