/**
 * What the user really heard of each bot turn, from the face's playout, not from the bytes the
 * provider sent (a provider streams a whole answer faster than real time; a barge-in one second
 * into a five-second answer must tell the provider "1000 ms", not "5000 ms").
 *
 * `S2SProcessor` records the audio it hands to the face per turn (`fed`); `PlayoutMeter`, placed
 * after the output, records each 40 ms speech frame the face emitted and the output wrote. A
 * speech frame plays the next 40 ms of the turn's queue, or silence when the queue ran dry (an
 * underrun inside an open turn), so a turn's played time is the queue drained by its frames:
 * the same FIFO the face runs, kept on our side of the FaceSession contract.
 */
import { durationMs } from '../../core/audio.ts';
import type { Direction, Frame } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';

interface LedgerTurn {
  readonly turnId: string;
  fedMs: number;
  playedMs: number;
  started: boolean;
}

export class PlayoutLedger {
  private readonly turns: LedgerTurn[] = [];
  private playing: LedgerTurn | undefined;
  private readonly listeners: Array<(turnId: string) => void> = [];

  /** `fn` runs each time a speech frame of a turn has played (after the ledger counted it). */
  onPlayed(fn: (turnId: string) => void): void {
    this.listeners.push(fn);
  }

  /** `ms` more audio of `turnId` went to the face. */
  fed(turnId: string, ms: number): void {
    let turn = this.turns.find((t) => t.turnId === turnId);
    if (!turn) {
      turn = { turnId, fedMs: 0, playedMs: 0, started: false };
      this.turns.push(turn);
      // Keep the ledger bounded: turns long finished are of no use.
      if (this.turns.length > 16) this.turns.splice(0, this.turns.length - 16);
    }
    turn.fedMs += ms;
  }

  /** A speech frame of `ms` was played; `turnStart` marks the first frame of a face turn. */
  played(ms: number, turnStart: boolean): void {
    if (turnStart || !this.playing) {
      const next = this.turns.find((t) => !t.started && t.fedMs > 0);
      if (next) {
        next.started = true;
        this.playing = next;
      }
    }
    const turn = this.playing;
    if (!turn) return;
    turn.playedMs += Math.max(0, Math.min(ms, turn.fedMs - turn.playedMs));
    for (const fn of this.listeners) fn(turn.turnId);
  }

  /** Audio of `turnId` the user heard so far (ms). */
  playedMs(turnId: string): number {
    return this.turns.find((t) => t.turnId === turnId)?.playedMs ?? 0;
  }

  fedMs(turnId: string): number {
    return this.turns.find((t) => t.turnId === turnId)?.fedMs ?? 0;
  }

  /** The face was cancelled: nothing queued will play. */
  cancelled(): void {
    for (const t of this.turns) t.started = true;
    this.playing = undefined;
  }
}

/**
 * Counts what the output actually played into a `PlayoutLedger`: the face's speech frames
 * (`output-image` of type speech-start/speech, 40 ms each), or, without a face, the bot audio
 * itself. Passes every frame on unchanged.
 */
export class PlayoutMeter extends FrameProcessor {
  private turnStartPending = false;

  constructor(private readonly ledger: PlayoutLedger, options: ProcessorOptions = {}) {
    super(options);
  }

  protected override process(f: Frame, direction: Direction): void {
    if (direction === 'downstream') {
      switch (f.type) {
        case 'output-image':
          if (f.frameType === 'speech-start' || f.frameType === 'speech') this.ledger.played(40, f.frameType === 'speech-start');
          break;
        case 'tts-started':
          this.turnStartPending = true;
          break;
        case 'tts-audio':
          // Without a face the output plays bot audio directly (with one, only empty word frames pass).
          if (f.pcm.length > 0) {
            this.ledger.played(durationMs(f.pcm.length, f.sampleRate, f.channels), this.turnStartPending);
            this.turnStartPending = false;
          }
          break;
        case 'interruption':
          this.ledger.cancelled();
          break;
        default:
          break;
      }
    }
    this.push(f, direction);
  }
}
