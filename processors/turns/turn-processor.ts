/**
 * TurnProcessor: decides when the user's turn starts and ends, and what visitor sound over the
 * bot means. It sits after the STT (it needs the words) and owns `user-started-speaking` /
 * `user-stopped-speaking`, which everything after it reads as the user's turn.
 *
 * End of turn. The VAD reports a short pause (`vad-speech-stopped`, its `stopMs`, 200 ms). The
 * turn analyzer then reads the words so far, the prosody of the last speech and the silence, and
 * says `complete` (the turn ends now), `unsure` (it ends once the silence reaches `unsureMs`) or
 * `incomplete` (once it reaches `incompleteMs`: a thinking pause). Words arriving during the
 * pause (a final transcript with a `?`) are read again and can end it sooner; speech ends the
 * wait. While it waits, `user-turn-pending` lets the user aggregator start a preemptive reply.
 * Without an analyzer every pause ends the turn (the old fixed rule, with a VAD stop of 800 ms).
 * An analyzer may answer later (a promise: a model in a worker); until it does the turn waits as
 * for an unfinished one, and an answer no longer wanted is aborted and ignored (`TurnAnalyzer`).
 *
 * False interruptions. Visitor sound while the bot speaks (and interruptions are allowed) pauses
 * the bot at once (`bot-pause`: the output and the face stop where they are), and the decision
 * waits for words: real words end the bot's turn as a barge-in always did (an
 * `interruption-request`, and the user's turn starts with those words); a backchannel ("uh-huh",
 * "right"), or no words within `falseInterruptionMs` of the sound ending, resumes the bot from the
 * sample where it stopped (`bot-pause-ended`). Sound longer than `backchannelMaxMs` is a real
 * interruption whatever its words. A backchannel is not a user turn: its transcripts go no further.
 */
import { concat } from '../../core/audio.ts';
import type { TimerHandle } from '../../core/clock.ts';
import { frame, signal, type Direction, type Frame, type FrameOf } from '../../core/frames.ts';
import { resolveOptions, type OptionsFor, type Resolved } from '../../core/options.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import { WORKER_DEFAULTS } from '../../core/worker.ts';
import type { TurnAnalyzer, TurnSignals, TurnVerdict } from '../services.ts';
import { hasWords, isBackchannel } from './turn-endings.ts';

export const TURN_DEFAULTS = {
  /** The agent's language: which open-ending and backchannel word lists apply. */
  language: 'en',
  /**
   * Silence (ms since the user's last speech) that ends a turn the analyzer is unsure about.
   * Above 1.2 s so a thinking pause of that length is not cut on an undecided reading (the
   * turns corpus: at 1000 ms, 2 of 21 open utterances were cut at 1.2 s pauses this way).
   */
  unsureMs: 1500,
  /** Silence that ends a turn the analyzer judged incomplete (a pause to think). */
  incompleteMs: 2500,
  /** Let the user aggregator start a reply while a pause is undecided (held until the turn ends). */
  preemptiveGeneration: true,
  /** Visitor sound over the bot pauses it, and a backchannel or no words resumes it. false: any sound cuts it (the old rule). */
  resumeFalseInterruptions: true,
  /** After the visitor's sound over a paused bot stops, how long to wait for words before resuming (ms). */
  falseInterruptionMs: 600,
  /** Visitor sound over a paused bot longer than this (ms) is a real interruption, words or not. */
  backchannelMaxMs: 900,
  /** More backchannel words (any language), beside the built-in lists (turn-endings.ts). */
  backchannelWords: [] as readonly string[],
  /** The latest audio kept for the analyzer's prosody reading (ms). */
  analysisAudioMs: 1000,
  /**
   * The STT's terminal punctuation says a sentence ended (false when it closes every segment it is
   * given: `STTService.punctuation` 'segments'; the voice pipeline sets it from the STT).
   */
  closingPunctuation: true as boolean,
} as const;

export interface TurnOptions extends ProcessorOptions, OptionsFor<typeof TURN_DEFAULTS> {}

/** Counters of one session (tests, benchmarks, the session's metadata). */
export interface TurnStats {
  turns: number;
  pauses: number;
  resumed: number;
  interrupted: number;
  /** Decisions by reason (`text:closed`, `prosody:fall`, ...), as first taken at each pause. */
  readonly reasons: Record<string, number>;
}

/** The verdict a turn holds while the analyzer's answer is pending: at most the incomplete bound. */
const PENDING: TurnVerdict = { decision: 'incomplete', reason: 'analyzer:pending' };

interface Pause {
  readonly startedAt: number;
  speaking: boolean;
  readonly held: FrameOf<'transcription'>[];
  finals: string[];
  interim: string;
  timer: TimerHandle | undefined;
  longTimer: TimerHandle | undefined;
}

export class TurnProcessor extends FrameProcessor {
  readonly settings: Resolved<typeof TURN_DEFAULTS>;
  readonly stats: TurnStats = { turns: 0, pauses: 0, resumed: 0, interrupted: 0, reasons: {} };
  private turnOpen = false;
  private speech = false;
  private botSpeaking = false;
  /** Clock time when the user's last speech ended (the VAD's stop minus its silence). */
  private silenceSince: number | null = null;
  private vadStoppedAt = 0;
  private finals: string[] = [];
  private interim = '';
  private endTimer: TimerHandle | undefined;
  private verdict: TurnVerdict | null = null;
  /** The analyzer's answer being waited for (aborted when it is no longer wanted), and whether it is the pause's first reading. */
  private analysis: { readonly controller: AbortController; readonly first: boolean } | null = null;
  private analyzerFailureReported = false;
  private pause: Pause | null = null;
  /** After a false interruption, its late transcripts are dropped until the visitor speaks again. */
  private swallowing = false;
  private readonly audio: Int16Array[] = [];
  private audioSamples = 0;
  private audioRate: number = WORKER_DEFAULTS.audioInSampleRate;

  constructor(private readonly analyzer: TurnAnalyzer | null, options: TurnOptions = {}) {
    super(options);
    this.settings = resolveOptions(TURN_DEFAULTS, options);
  }

  /** The user's turn is open (started, not yet ended). */
  get userTurnOpen(): boolean {
    return this.turnOpen;
  }

  /** The bot is paused by visitor sound, waiting for the decision. */
  get botPaused(): boolean {
    return this.pause !== null;
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'input-audio':
        this.push(f, direction);
        if (f.channels === 1) this.remember(f.pcm, f.sampleRate);
        return;
      case 'vad-speech-started':
        this.push(f, direction);
        if (direction === 'downstream') this.speechStarted();
        return;
      case 'vad-speech-stopped':
        this.push(f, direction);
        if (direction === 'downstream') this.speechStopped(f.silenceMs);
        return;
      case 'transcription':
        if (direction === 'downstream') return this.transcript(f);
        break;
      case 'bot-started-speaking':
        this.botSpeaking = true;
        break;
      case 'bot-stopped-speaking':
        this.botSpeaking = false;
        break;
      case 'interruption':
        this.endPause();
        break;
      case 'end':
      case 'cancel':
        this.clock.clearTimeout(this.endTimer);
        this.dropAnalysis();
        this.endPause();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  // ---- the user's speech ----------------------------------------------------------------------

  private speechStarted(): void {
    this.speech = true;
    this.silenceSince = null;
    this.swallowing = false;
    if (this.pause) {
      this.pause.speaking = true;
      this.clock.clearTimeout(this.pause.timer);
      this.pause.timer = undefined;
      return;
    }
    if (this.turnOpen) {
      // The user went on after a pause: whatever was pending is off.
      this.clock.clearTimeout(this.endTimer);
      this.dropAnalysis();
      this.verdict = null;
      return;
    }
    if (this.botSpeaking && this.interruptionsAllowed) {
      if (this.settings.resumeFalseInterruptions) return this.startPause();
      this.push(frame('interruption-request', { reason: 'user barge-in' }), 'upstream');
    }
    this.openTurn();
  }

  private speechStopped(silenceMs: number): void {
    this.speech = false;
    this.vadStoppedAt = this.clock.now();
    this.silenceSince = this.vadStoppedAt - silenceMs;
    if (this.pause) {
      this.pause.speaking = false;
      this.judgePause();
      return;
    }
    if (this.turnOpen) this.evaluate(true);
  }

  private transcript(f: FrameOf<'transcription'>): void {
    if (this.swallowing) return;
    if (this.pause) {
      const p = this.pause;
      p.held.push(f);
      if (f.final) {
        p.finals.push(f.text.trim());
        p.interim = '';
      } else p.interim = f.text.trim();
      this.judgePause();
      return;
    }
    this.push(f);
    if (!this.turnOpen) return;
    if (f.final) {
      this.finals.push(f.text.trim());
      this.interim = '';
    } else this.interim = f.text.trim();
    // New words during the pause may settle it (a final with a question mark).
    if (!this.speech && this.silenceSince !== null) this.evaluate(false);
  }

  private openTurn(): void {
    this.turnOpen = true;
    this.finals = [];
    this.interim = '';
    this.verdict = null;
    this.stats.turns++;
    this.push(signal('user-started-speaking'));
    this.push(signal('user-started-speaking'), 'upstream');
  }

  /** Asks the analyzer about the pause and schedules the end of the turn at its bound (at once, or when its answer comes). */
  private evaluate(first: boolean): void {
    const silenceSince = this.silenceSince;
    if (silenceSince === null) return;
    // Newer words ask again: an answer still pending is dropped (its pause's first reading is this one).
    const firstPending = this.analysis?.first ?? false;
    this.dropAnalysis();
    first ||= firstPending;
    if (!this.analyzer) return this.decide({ decision: 'complete', reason: 'silence' }, silenceSince, first);
    const signals: TurnSignals = {
      transcript: this.transcriptSoFar(),
      language: this.settings.language,
      audio: concat(this.audio),
      sampleRate: this.audioRate,
      silenceMs: this.clock.now() - silenceSince,
      closingPunctuation: this.settings.closingPunctuation,
    };
    const controller = new AbortController();
    let answer: TurnVerdict | PromiseLike<TurnVerdict>;
    try {
      answer = this.analyzer.analyze(signals, { signal: controller.signal });
    } catch (err) {
      return this.analyzerFailed(err, silenceSince, first);
    }
    if (!isPromiseLike(answer)) return this.applyAnswer(answer, silenceSince, first);
    const analysis = { controller, first };
    this.analysis = analysis;
    // Until the answer comes, the turn waits as for an unfinished one (no preemptive reply yet).
    this.verdict = PENDING;
    this.schedule(silenceSince + this.settings.incompleteMs);
    answer.then(
      (verdict) => {
        if (this.analysis !== analysis) return;
        this.analysis = null;
        this.applyAnswer(verdict, silenceSince, first);
      },
      (err: unknown) => {
        if (this.analysis !== analysis) return;
        this.analysis = null;
        this.analyzerFailed(err, silenceSince, first);
      },
    );
  }

  /** Applies an analyzer's answer; one that is not a verdict is a failure. */
  private applyAnswer(verdict: TurnVerdict, silenceSince: number, first: boolean): void {
    if (!isVerdict(verdict)) return this.analyzerFailed(new Error(`turn analyzer ${this.analyzer?.name ?? ''} answered ${JSON.stringify(verdict)}, not a verdict`), silenceSince, first);
    this.decide(verdict, silenceSince, first);
  }

  private analyzerFailed(err: unknown, silenceSince: number, first: boolean): void {
    if (!this.analyzerFailureReported) {
      this.analyzerFailureReported = true;
      this.pushError(`turn analyzer ${this.analyzer?.name ?? ''} failed (${err instanceof Error ? err.message : String(err)}); its pauses wait the unsure bound`, { code: 'turn_analyzer_failed', cause: err });
    }
    this.decide({ decision: 'unsure', reason: 'analyzer:error' }, silenceSince, first);
  }

  private decide(verdict: TurnVerdict, silenceSince: number, first: boolean): void {
    if (first) this.count(verdict);
    this.verdict = verdict;
    const bound = verdict.decision === 'complete' ? 0 : verdict.decision === 'unsure' ? this.settings.unsureMs : this.settings.incompleteMs;
    if (!this.schedule(silenceSince + bound)) return;
    if (this.settings.preemptiveGeneration) this.push(frame('user-turn-pending', { decision: verdict.decision, reason: verdict.reason }));
  }

  /** Ends the turn at clock time `at` (now, when it has passed); false when it ended now. */
  private schedule(at: number): boolean {
    const left = at - this.clock.now();
    this.clock.clearTimeout(this.endTimer);
    if (left <= 0) {
      this.endTurn();
      return false;
    }
    this.endTimer = this.clock.setTimeout(() => this.endTurn(), left);
    return true;
  }

  private count(verdict: TurnVerdict): void {
    this.stats.reasons[verdict.reason] = (this.stats.reasons[verdict.reason] ?? 0) + 1;
  }

  /** The pending answer is no longer wanted: abort it (a late one is ignored anyway). */
  private dropAnalysis(): void {
    const analysis = this.analysis;
    if (!analysis) return;
    this.analysis = null;
    analysis.controller.abort();
  }

  private endTurn(): void {
    this.clock.clearTimeout(this.endTimer);
    this.endTimer = undefined;
    // The incomplete bound came before the analyzer's answer.
    if (this.analysis?.first) this.count(PENDING);
    this.dropAnalysis();
    if (!this.turnOpen) return;
    this.turnOpen = false;
    const endOfTurnMs = Math.max(0, Math.round(this.clock.now() - this.vadStoppedAt));
    const decision = this.verdict ? `${this.verdict.decision} (${this.verdict.reason})` : undefined;
    this.verdict = null;
    this.push(frame('user-stopped-speaking', { endOfTurnMs, decision }));
    this.push(frame('user-stopped-speaking', { endOfTurnMs, decision }), 'upstream');
  }

  private transcriptSoFar(): string {
    return [...this.finals, this.interim].filter(Boolean).join(' ');
  }

  private remember(pcm: Int16Array, sampleRate: number): void {
    if (sampleRate !== this.audioRate) {
      this.audio.length = 0;
      this.audioSamples = 0;
      this.audioRate = sampleRate;
    }
    this.audio.push(pcm);
    this.audioSamples += pcm.length;
    const max = (this.settings.analysisAudioMs / 1000) * sampleRate;
    while (this.audio.length > 1 && this.audioSamples - this.audio[0]!.length >= max) this.audioSamples -= this.audio.shift()!.length;
  }

  // ---- visitor sound over the bot -------------------------------------------------------------

  private startPause(): void {
    this.stats.pauses++;
    const pause: Pause = { startedAt: this.clock.now(), speaking: true, held: [], finals: [], interim: '', timer: undefined, longTimer: undefined };
    this.pause = pause;
    this.push(signal('bot-pause'));
    // Long sound is a turn being taken, whatever its words turn out to be.
    pause.longTimer = this.clock.setTimeout(() => {
      if (this.pause === pause && pause.speaking) this.interrupt('long_speech');
    }, this.settings.backchannelMaxMs);
  }

  /** Decides a pause from what is known now, or waits for words. */
  private judgePause(): void {
    const p = this.pause;
    if (!p) return;
    const text = [...p.finals, p.interim].filter(Boolean).join(' ');
    if (hasWords(text) && !isBackchannel(text, this.settings.language, this.settings.backchannelWords)) return this.interrupt('words');
    if (p.speaking) return; // a backchannel still being said, or nothing yet: wait for the sound to end
    if (hasWords(text)) return this.resume('backchannel');
    if (p.timer === undefined) {
      p.timer = this.clock.setTimeout(() => {
        if (this.pause === p) this.resume('no_words');
      }, this.settings.falseInterruptionMs);
    }
  }

  private resume(reason: 'backchannel' | 'no_words'): void {
    const p = this.pause!;
    this.endPause();
    this.stats.resumed++;
    // Transcripts of this sound still on their way are not a user turn.
    this.swallowing = true;
    this.push(frame('bot-pause-ended', { outcome: 'resumed', reason, text: [...p.finals, p.interim].filter(Boolean).join(' ') }));
  }

  private interrupt(reason: 'words' | 'long_speech'): void {
    const p = this.pause!;
    this.endPause();
    this.stats.interrupted++;
    this.push(frame('bot-pause-ended', { outcome: 'interrupted', reason, text: [...p.finals, p.interim].filter(Boolean).join(' ') }));
    // A barge-in as before: the worker interrupts everyone (the output drops what was not played).
    this.push(frame('interruption-request', { reason: 'user barge-in' }), 'upstream');
    this.openTurn();
    for (const t of p.held) this.push(t);
    this.finals = [...p.finals];
    this.interim = p.interim;
    if (!p.speaking && this.silenceSince !== null) this.evaluate(true);
  }

  private endPause(): void {
    if (!this.pause) return;
    this.clock.clearTimeout(this.pause.timer);
    this.clock.clearTimeout(this.pause.longTimer);
    this.pause = null;
  }

  override cleanup(): void {
    this.clock.clearTimeout(this.endTimer);
    this.dropAnalysis();
    this.endPause();
    super.cleanup();
  }
}

function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}

function isVerdict(value: unknown): value is TurnVerdict {
  const v = value as Partial<TurnVerdict> | null;
  return typeof v === 'object' && v !== null && (v.decision === 'complete' || v.decision === 'unsure' || v.decision === 'incomplete') && typeof v.reason === 'string';
}
