/**
 * S2SProcessor: one speech-to-speech provider conversation, mapped onto the frames the rest of
 * the pipeline already understands, so the face, the output, the session messages and the call
 * history work the same as in `svc` mode:
 *
 * | provider event | frames |
 * | --- | --- |
 * | user speech start / stop | `user-started-speaking` / `user-stopped-speaking` (both ways) |
 * | user transcript | `transcription` (interim and final); a final one also as the client's `transcript-turn` |
 * | bot turn | `llm-response-start`, `tts-started`, `tts-audio`..., `tts-stopped`, `llm-response-end` |
 * | bot words as produced | `llm-text`; the words heard, as the output plays them: `tts-text` (see below) |
 * | barge-in | `interruption-request` upstream (the worker interrupts everyone) |
 * | usage | `metrics` (usage counters; TTFB = user stopped -> first bot audio) |
 * | failure | `error` with code `sts_<S2SErrorCode>`, fatal when the session cannot go on |
 *
 * Barge-in: the provider reports the user speaking over the bot. The processor asks the worker
 * for an interruption; when it arrives, the turn's remaining audio is dropped (late provider
 * audio too), the face is cancelled by the avatar downstream, and the provider is told how much
 * of the turn the user heard, from the face's playout (`PlayoutLedger`).
 *
 * Words heard. Providers give no word timings, so the words of a turn still streaming are
 * reported (`tts-text`) as its playout (`PlayoutLedger`, after the output) reaches their estimated
 * place. That report starts here, at the head of the pipeline, and reaches the output behind
 * whatever the output already queued; so once the provider has sent the whole turn, its words not
 * yet reported travel in-band instead, ahead of its `tts-stopped`: an empty `tts-audio` carrying
 * them, timed at their place in the turn's audio, which the avatar (or, without a face, the
 * output) releases as that audio plays, always before the turn's end. Otherwise, on a loaded
 * machine, the output could end the spoken turn (and the client its transcript) before the last
 * words came round.
 *
 * Failure policy (docs/third-party.md): a refused key, unknown config or refused settings end the
 * session at once (fatal error). A connection lost mid-session ends the bot's current turn
 * (what was received still plays), then reconnects with backoff, replaying the transcript where
 * the provider allows; when every attempt fails, the session ends (fatal `sts_connection_lost`).
 */
import type { Subscription } from 'rxjs';
import { Resampler, durationMs } from '../../core/audio.ts';
import { isAbortError } from '../../core/clock.ts';
import { frame, signal, type Direction, type Frame } from '../../core/frames.ts';
import { ProcessorMetrics } from '../../core/metrics.ts';
import { isPermanentFailure, ReconnectPolicy } from '../reconnect-policy.ts';
import { resolveOptions } from '../../core/options.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import { wordPlaces, wordsHeard } from './heard-words.ts';
import type { PlayoutLedger } from './playout.ts';
import { S2SError, type S2SConnectOptions, type S2SConnection, type S2SEvent, type S2SHistoryEntry, type S2SService, type S2STurnRef } from './s2s-service.ts';
import { errorMessage } from '../../core/error-message.ts';

export const S2S_DEFAULTS = {
  /** First reconnect delay after a dropped connection; doubles per failed attempt. */
  reconnectBaseMs: 500,
  /** Longest wait between reconnect attempts. */
  reconnectMaxMs: 4_000,
  /** Attempts before the session is ended. Two: a provider that is gone for seconds is gone. */
  reconnectAttempts: 2,
  /**
   * A connection open this long (ms) was a working one: the attempts are refilled when it drops.
   * One that drops sooner does not refill them (a provider that accepts and drops at once is
   * given up on); the same policy as speech-to-text (processors/reconnect-policy.ts).
   */
  stableConnectionMs: 5_000,
  /** Transcript turns replayed into a new connection (where the provider accepts history). */
  historyTurns: 20,
  /**
   * Speaking rate used to place the heard words of a turn the provider is still sending (no
   * word timings come with speech-to-speech audio); about 15 characters per second of speech.
   */
  charsPerSecond: 15,
} as const;

export interface S2SProcessorOptions extends ProcessorOptions {
  /** Everything the provider needs except the signal, the history and `allowInterruptions` (the start frame's). */
  readonly connect: Omit<S2SConnectOptions, 'signal' | 'history' | 'allowInterruptions'>;
  /** Shared with the `PlayoutMeter` after the output. */
  readonly playout: PlayoutLedger;
  readonly reconnectBaseMs?: number;
  readonly reconnectMaxMs?: number;
  readonly reconnectAttempts?: number;
  readonly stableConnectionMs?: number;
}

interface BotTurn {
  /** Unique across reconnections (providers restart their ids on a new conversation). */
  readonly key: string;
  readonly ref: S2STurnRef;
  started: boolean;
  ended: boolean;
  cancelled: boolean;
  text: string;
  finalText: string | undefined;
  /** Words of the turn already reported heard (`tts-text`). */
  wordsReported: number;
  /**
   * Words handed in-band to the face/output when the provider ended the turn (they are released
   * as their audio plays; this processor only counts them as heard, from the playout).
   */
  wordsPlaced: number;
  /** Rate of the turn's audio (its in-band words go at the same rate, not to reset a resampler). */
  sampleRate: number;
  /** In the history replayed after a reconnect. */
  remembered: boolean;
}

export class S2SProcessor extends FrameProcessor {
  private connection: S2SConnection | undefined;
  private subscription: Subscription | undefined;
  private resampler: Resampler | undefined;
  private readonly turns = new Map<string, BotTurn>();
  private current: BotTurn | undefined;
  /** Set while an interruption we asked for is on its way; true when the provider already stopped. */
  private pendingBargeIn: { providerStopped: boolean } | undefined;
  private readonly history: S2SHistoryEntry[] = [];
  private readonly context: string[] = [];
  /** Bumped per connection: turn keys are `<epoch>/<provider turn id>`. */
  private epoch = 0;
  private reconnecting = false;
  private closed = false;
  private readonly abort = new AbortController();
  // Metrics go upstream to the worker: downstream, taps that read the svc LLM/TTS latency stages
  // would take the provider's first-audio time for theirs.
  private readonly metrics = ProcessorMetrics.for(this.name, () => this.clock, (f) => this.push(f, 'upstream'), () => this.startFrame?.enableMetrics ?? false);
  /** Reconnections performed (diagnostics, tests). */
  reconnects = 0;
  /** Provider audio dropped because its turn was interrupted (diagnostics, tests). */
  droppedAudioMs = 0;

  private readonly reconnection: ReconnectPolicy;

  constructor(private readonly service: S2SService, private readonly options: S2SProcessorOptions) {
    super(options);
    const s = resolveOptions(S2S_DEFAULTS, options);
    this.reconnection = new ReconnectPolicy({ baseMs: s.reconnectBaseMs, maxMs: s.reconnectMaxMs, attempts: s.reconnectAttempts, stableConnectionMs: s.stableConnectionMs }, () => this.clock);
    options.playout.onPlayed((key) => this.reportProgress(key));
  }

  /**
   * System context for later turns (the client's `append-system-context`): sent to the live
   * connection, and again to any connection opened after a drop.
   */
  appendSystemContext(text: string): void {
    const t = text.trim();
    if (!t) return;
    this.context.push(t);
    this.connection?.addContext?.(t);
  }

  /** The live connection (tests, diagnostics). */
  get live(): S2SConnection | undefined {
    return this.connection;
  }

  protected override async onStart(): Promise<void> {
    try {
      await this.open();
    } catch (err) {
      this.fail(err);
    }
  }

  protected override async onEnd(): Promise<void> {
    await this.close();
  }

  protected override onCancel(): void {
    // The runner waits for it: the provider socket is closed before the bot is reported finished.
    this.releasing(this.close());
  }

  protected override process(f: Frame, direction: Direction): void {
    if (direction === 'upstream') {
      return this.push(f, direction);
    }
    switch (f.type) {
      case 'input-audio':
        this.sendAudio(f.pcm, f.sampleRate, f.channels);
        break;
      case 'interruption':
        this.cutPlayingTurns();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  // ---- connection -------------------------------------------------------------------------------

  private async open(): Promise<void> {
    const c = this.options.connect;
    // Only the first connection opens the conversation: a reconnect mid-call greeting the user
    // again ("Hello! I am Ada") would be heard as the bot starting over.
    const resumed = this.epoch > 0;
    const connection = await this.service.connect({
      ...c,
      ...(resumed ? { greeting: null, resumed: true } : {}),
      allowInterruptions: this.interruptionsAllowed,
      history: this.history.slice(-S2S_DEFAULTS.historyTurns),
      signal: this.abort.signal,
    });
    if (this.closed) {
      await connection.close();
      return;
    }
    this.epoch++;
    this.connection = connection;
    this.reconnection.opened();
    if (this.epoch > 1) for (const text of this.context) connection.addContext?.(text);
    this.subscription = connection.events.subscribe({
      next: (e) => this.onEvent(e),
      error: (err) => this.onDrop(err),
      complete: () => {
        if (!this.closed) this.onDrop(new S2SError('connection_lost', 'the provider closed the conversation'));
      },
    });
  }

  private onDrop(err: unknown): void {
    if (this.closed || this.reconnecting) return;
    this.subscription?.unsubscribe();
    this.subscription = undefined;
    this.connection = undefined;
    if (isPermanentFailure(err)) return this.fail(err);
    // What was received of the current turn still plays; the rest will never come.
    this.endCurrentTurn();
    this.reconnecting = true;
    void this.reconnect(err).finally(() => (this.reconnecting = false));
  }

  private async reconnect(cause: unknown): Promise<void> {
    const outcome = await this.reconnection.reconnect(cause, () => this.open(), { stopped: () => this.closed, signal: this.abort.signal });
    if (outcome.kind === 'reconnected') {
      this.reconnects++;
      this.pushError(`speech-to-speech connection lost (${errorMessage(cause)}); reconnected`, { code: 'sts_reconnected' });
    } else if (outcome.kind === 'permanent') {
      this.fail(outcome.error);
    } else if (outcome.kind === 'exhausted') {
      const attempts = this.reconnection.settings.attempts;
      this.fail(new S2SError('connection_lost', `speech-to-speech connection lost and ${attempts} reconnect attempts failed (${errorMessage(outcome.last ?? cause)})`));
    }
  }

  private fail(err: unknown): void {
    if (this.closed) return;
    const code = err instanceof S2SError ? err.code : 'provider_error';
    this.pushError(errorMessage(err), { fatal: true, code: `sts_${code}`, cause: err });
  }

  private async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.abort.abort();
    this.subscription?.unsubscribe();
    this.subscription = undefined;
    const connection = this.connection;
    this.connection = undefined;
    await connection?.close().catch(() => undefined);
  }

  private sendAudio(pcm: Int16Array, sampleRate: number, channels: number): void {
    const connection = this.connection;
    if (!connection || channels !== 1 || !(sampleRate > 0)) return;
    let audio = pcm;
    if (sampleRate !== connection.inputSampleRate) {
      if (!this.resampler || this.resampler.fromRate !== sampleRate || this.resampler.toRate !== connection.inputSampleRate) {
        this.resampler = new Resampler(sampleRate, connection.inputSampleRate);
      }
      audio = this.resampler.process(pcm);
    }
    if (audio.length) connection.sendAudio(audio);
  }

  // ---- provider events --------------------------------------------------------------------------

  private onEvent(e: S2SEvent): void {
    switch (e.type) {
      case 'ready':
        return;
      case 'user-started-speaking':
        this.push(signal('user-started-speaking'));
        this.push(signal('user-started-speaking'), 'upstream');
        // Speech over a bot turn that is still playing is a barge-in; the provider has stopped
        // generating (server VAD) but the face still holds audio.
        if (this.botActive()) this.requestInterruption(true);
        return;
      case 'user-stopped-speaking':
        this.push(signal('user-stopped-speaking'));
        this.push(signal('user-stopped-speaking'), 'upstream');
        this.metrics.startTtfb();
        return;
      case 'user-transcript':
        if (!e.text.trim()) return;
        this.push(frame('transcription', { text: e.text, final: e.final, language: this.options.connect.language, timestampMs: this.clock.now() }));
        if (e.final) {
          // The user's committed turn, as the user aggregator reports it in svc mode.
          this.remember({ role: 'user', text: e.text.trim() });
          this.push(frame('client-message', { message: { type: 'transcript-turn', owner: 'user', text: e.text.trim() } }));
        }
        return;
      case 'bot-turn-started':
        this.turnFor(e.turn);
        return;
      case 'bot-audio':
        return this.onBotAudio(e.turn, e.pcm, e.sampleRate);
      case 'bot-transcript': {
        const turn = this.turnFor(e.turn);
        if (turn.cancelled) return;
        if (e.final) {
          turn.finalText = e.text;
          return;
        }
        turn.text += e.text;
        if (e.text) this.push(frame('llm-text', { text: e.text }));
        return;
      }
      case 'bot-turn-ended': {
        const turn = this.turns.get(this.keyOf(e.turn));
        if (turn && turn === this.current) this.endCurrentTurn();
        else if (turn) turn.ended = true;
        return;
      }
      case 'interrupted': {
        if (this.botActive()) this.requestInterruption(true);
        // Interruptions refused (allow_interruption off): what the face holds plays out, the
        // provider's discarded rest of the turn is not taken.
        const turn = e.turn && this.turns.get(this.keyOf(e.turn));
        if (turn && !turn.cancelled) {
          if (turn === this.current) this.endCurrentTurn();
          else turn.ended = true;
        }
        return;
      }
      case 'usage':
        this.metrics.usage({ ...e.counters });
        return;
      case 'warning':
        this.pushError(e.message, { code: `sts_${e.code}` });
        return;
    }
  }

  private keyOf(ref: S2STurnRef): string {
    return `${this.epoch}/${ref.turnId}`;
  }

  private turnFor(ref: S2STurnRef): BotTurn {
    const key = this.keyOf(ref);
    let turn = this.turns.get(key);
    if (!turn) {
      turn = { key, ref, started: false, ended: false, cancelled: false, text: '', finalText: undefined, wordsReported: 0, wordsPlaced: 0, sampleRate: 0, remembered: false };
      this.turns.set(key, turn);
      if (this.turns.size > 32) this.turns.delete(this.turns.keys().next().value!);
    } else if (ref.itemId && !turn.ref.itemId) {
      turn = Object.assign(turn, { ref: { ...turn.ref, itemId: ref.itemId } });
    }
    return turn;
  }

  private onBotAudio(ref: S2STurnRef, pcm: Int16Array, sampleRate: number): void {
    const turn = this.turnFor(ref);
    const ms = durationMs(pcm.length, sampleRate);
    if (turn.cancelled || turn.ended) {
      this.droppedAudioMs += ms;
      return;
    }
    if (!turn.started) {
      this.pendingBargeIn = undefined;
      // A new turn while another is open: the older one has sent all it will send.
      if (this.current && this.current !== turn) this.endCurrentTurn();
      turn.started = true;
      turn.sampleRate = sampleRate;
      this.current = turn;
      this.metrics.stopTtfb();
      this.push(frame('llm-response-start', { responseId: turn.key }));
      this.push(frame('tts-started', { contextId: turn.key }));
    }
    this.options.playout.fed(turn.key, ms);
    this.push(frame('tts-audio', { pcm, sampleRate, channels: 1 }));
  }

  /** The provider sent the whole turn: the face plays what is queued, then fades out. */
  private endCurrentTurn(): void {
    const turn = this.current;
    if (!turn) return;
    this.current = undefined;
    turn.ended = true;
    if (turn.started && !turn.cancelled) {
      // Everything may have played already (a provider slower than real time).
      this.reportProgress(turn.key);
      this.placeRemainingWords(turn);
      this.push(frame('tts-stopped', { contextId: turn.key }));
      this.push(frame('llm-response-end', { responseId: turn.key }));
    }
  }

  /** True while the face holds or plays audio of a bot turn. */
  private botActive(): boolean {
    for (const turn of this.turns.values()) {
      if (!turn.started || turn.cancelled) continue;
      const id = turn.key;
      if (!turn.ended || this.options.playout.playedMs(id) + 40 < this.options.playout.fedMs(id)) return true;
    }
    return false;
  }

  private requestInterruption(providerStopped: boolean): void {
    if (this.pendingBargeIn) return;
    this.pendingBargeIn = { providerStopped };
    this.push(frame('interruption-request', { reason: 'user barge-in (speech-to-speech provider)' }), 'upstream');
  }

  /** The worker's interruption reached us: cut every playing turn and tell the provider what was heard. */
  private cutPlayingTurns(): void {
    const providerStopped = this.pendingBargeIn?.providerStopped ?? false;
    this.pendingBargeIn = undefined;
    const playout = this.options.playout;
    for (const turn of this.turns.values()) {
      if (!turn.started || turn.cancelled) continue;
      const id = turn.key;
      const fully = turn.ended && playout.playedMs(id) + 40 >= playout.fedMs(id);
      if (fully) continue;
      turn.cancelled = true;
      const playedMs = Math.round(playout.playedMs(id));
      this.connection?.interrupted(turn.ref, playedMs, !providerStopped && !turn.ended);
      // The words already reported as heard are all the user gets of this turn.
      if (turn.wordsReported && !turn.remembered) {
        turn.remembered = true;
        this.remember({ role: 'assistant', text: this.words(turn).slice(0, turn.wordsReported).join(' ') });
      }
    }
    if (this.current?.cancelled) this.current = undefined;
    playout.cancelled();
    this.metrics.reset();
  }

  // ---- what the user heard ----------------------------------------------------------------------

  /**
   * Called as the output plays a speech frame of `key`: the words of the turn the user has heard
   * by now go on as `tts-text`, as the output reports words in svc mode (so the session's bot
   * transcript is what was played). Providers give no word timings for speech-to-speech audio,
   * so the position is estimated: once the provider has sent the whole turn, as the share of its
   * audio played; before that, at `S2S_DEFAULTS.charsPerSecond` of played audio, never past the
   * text received.
   */
  private reportProgress(key: string): void {
    const turn = this.turns.get(key);
    if (!turn || !turn.started || turn.cancelled) return;
    const words = this.words(turn);
    if (turn.wordsReported >= words.length) return this.rememberPlayed(turn, words);
    const playout = this.options.playout;
    const heard = wordsHeard(words, playout.playedMs(key), playout.fedMs(key), turn.ended, S2S_DEFAULTS.charsPerSecond);
    if (heard <= turn.wordsReported) return;
    // Words placed in-band are reported by the output as they play: only counted here.
    const from = Math.max(turn.wordsReported, turn.wordsPlaced);
    turn.wordsReported = heard;
    if (heard > from) this.push(frame('tts-text', { text: words.slice(from, heard).join(' ') }));
    if (heard === words.length) this.rememberPlayed(turn, words);
  }

  /**
   * The provider sent the whole turn: its words not reported yet go downstream now, ahead of its
   * `tts-stopped`, as an empty `tts-audio` whose words are timed (from the end of the turn's audio,
   * so negative) where `reportProgress` would report them: word k of n once k+1 n-ths of the audio
   * played, the rest with its last 40 ms. The avatar releases each with the speech frame that plays
   * its place (all of them by the turn's last frame, before its held `tts-stopped`); without a face
   * the output announces them with its last audio. Reported from the head instead, they would join
   * the output's queue behind the turn's last frames and its end whenever the output lags the face
   * (a loaded machine), and the client's transcript of the turn would miss them.
   */
  private placeRemainingWords(turn: BotTurn): void {
    const words = this.words(turn);
    const from = Math.max(turn.wordsReported, turn.wordsPlaced);
    turn.wordsPlaced = Math.max(turn.wordsPlaced, words.length);
    if (from >= words.length) return;
    const timed = wordPlaces(words, from, this.options.playout.fedMs(turn.key));
    this.push(frame('tts-audio', { pcm: new Int16Array(0), sampleRate: turn.sampleRate, channels: 1, words: timed }));
  }

  /** A turn played to its end goes into the history replayed after a reconnect, once. */
  private rememberPlayed(turn: BotTurn, words: readonly string[]): void {
    if (!turn.ended || turn.remembered || !words.length) return;
    turn.remembered = true;
    this.remember({ role: 'assistant', text: words.join(' ') });
  }

  private words(turn: BotTurn): string[] {
    return (turn.finalText ?? turn.text).trim().split(/\s+/).filter(Boolean);
  }

  private remember(entry: S2SHistoryEntry): void {
    this.history.push(entry);
    if (this.history.length > S2S_DEFAULTS.historyTurns * 2) this.history.splice(0, this.history.length - S2S_DEFAULTS.historyTurns);
  }
}

