/**
 * The bot side of the session message protocol (protocol/session-messages.ts,
 * docs/session-messages.md): turns what happens in a running voice pipeline into `BotMessage`s
 * for the room's clients, and reads the clients' messages.
 *
 * - Bot -> client: a `FrameObserver` on the pipeline's worker. It reads frames where they are
 *   pushed by a known processor (the "taps": VAD, STT, LLM, TTS, avatar, output), so each event
 *   is seen once, at the point where it is true (speaking state from what the output actually
 *   played). Messages the pipeline itself addresses to the client (`client-message` frames: the
 *   user aggregator's transcript turns, the dispatcher's client-mode tool calls) come in through
 *   `fromPipeline` (the runner's media sink); user turns are completed (`final`, `turn_id`) and
 *   de-duplicated. The bot's transcript turn is built here from the words the output played
 *   (`tts-text`) and sent when the spoken turn ends (or is cut): the assistant aggregator's own
 *   message travels upstream after the output and can be dropped when the pipeline ends right
 *   after a farewell, so it is not used.
 * - Client -> bot: `parseClientMessage` checks a room `client_message` payload and returns a
 *   typed `ClientMessage` or a reason it was ignored; it never throws.
 */
import type { FrameObserver, FramePushed } from '../core/observer.ts';
import {
  SESSION_MESSAGE_LIMITS,
  type BotMessage,
  type BotState,
  type ClientMessage,
  type LatencyReport,
} from '../protocol/session-messages.ts';

/** Names of the processors whose pushes become messages (absent ones are simply not read). */
export interface SessionTaps {
  readonly vad?: string;
  readonly stt?: string;
  /** The turn processor: the user's turns, pauses of the bot. Without it, the VAD's user-started/stopped frames are read. */
  readonly turns?: string;
  /** The user turn aggregator: its decisions on preemptive replies. */
  readonly user?: string;
  readonly llm?: string;
  readonly tts?: string;
  readonly avatar?: string;
  /** The output transport: speaking state, words as played, the end of each spoken turn. */
  readonly output: string;
}

export interface SessionMessageEmitterOptions {
  /** Delivers one message to the room's clients (e.g. the publication's `sendMessage`). */
  readonly send: (message: BotMessage) => void;
  readonly taps: SessionTaps;
  /** `user_id` of user transcriptions (the session's client_user_ref, or the participant). */
  readonly userId: () => string;
  /** The VAD's stop delay (ms): the silence it waits before it says the user stopped. */
  readonly vadStopMs: number | null;
}

interface PendingTurn {
  readonly userStoppedAt: number;
  readonly endOfTurnMs: number | null;
  readonly decision: string | null;
  preemptive: boolean;
  /** Whether a final transcript arrived since the user started speaking, and when. */
  finalAt: number | null;
  llmTtfbMs: number | null;
  ttsTtfbMs: number | null;
  firstTtsAudioAt: number | null;
  firstAvatarAudioAt: number | null;
  /** Set when the user's transcript turn was committed (the bot will answer it). */
  turnId: number | null;
}

export class SessionMessageEmitter implements FrameObserver {
  private botState: BotState = 'initializing';
  private closed = false;
  /** User turns committed so far; bot turns carry the id of the user turn they answer (0: before any). */
  private turnId = 0;
  private pending: PendingTurn | null = null;
  /** Time of the last final transcript since the user last started speaking. */
  private finalSinceUserStart: number | null = null;
  /** A spoken bot turn is open (bot-started-speaking seen, not yet ended or interrupted). */
  private botTurnOpen = false;
  /** The output said the current turn's speech is over (`tts-stopped`). */
  private botTurnOver = false;
  /** The output stopped playing (bot-stopped-speaking) and has not started again. */
  private playbackDry = true;
  private botOutput = '';
  private lastTranscriptKey: string | null = null;
  /** The LLM's frames of an undecided preemptive reply: its messages wait for the decision. */
  private heldReply: { readonly replyId: string; readonly messages: BotMessage[]; thinking: boolean; ended: boolean; drop: boolean } | null = null;
  /** Decisions that overtook their reply's frames (a system frame passes the LLM's queue). */
  private readonly earlyDecisions = new Map<string, boolean>();
  /** A used preemptive reply's user turn, already sent: its transcript-turn from the pipeline is not sent again. */
  private committedText: string | null = null;
  /** Stats for the session outcome. */
  readonly stats = { userTurns: 0, botTurns: 0, transcriptTurns: 0, messages: 0, latenciesMs: [] as number[] };

  constructor(private readonly options: SessionMessageEmitterOptions) {}

  get state(): BotState {
    return this.botState;
  }

  /** Sends `bot-state` when it changes (`ended` is final). */
  setState(state: BotState): void {
    if (this.closed || state === this.botState || this.botState === 'ended') return;
    this.botState = state;
    this.send({ type: 'bot-state', state });
  }

  /** Sends a message now (the runner's own: bot-ready, session-ended, errors). */
  send(message: BotMessage): void {
    if (this.closed) return;
    this.stats.messages++;
    this.options.send(message);
  }

  /** No message is sent after this (the session ended). */
  close(): void {
    this.closed = true;
    this.pending = null;
  }

  /**
   * A message the pipeline addresses to the client (a `client-message` frame reaching the output
   * transport): transcript turns are completed and de-duplicated, the rest goes as it is
   * (client-mode tool calls keep their `{type: 'tool-call', function_name, tool_call_id, arguments}` shape).
   */
  fromPipeline(message: Readonly<Record<string, unknown>>): void {
    if (this.closed) return;
    if (message.type !== 'transcript-turn') {
      this.send(message as BotMessage);
      return;
    }
    // The bot's turns are sent from what the output played (endBotTurn).
    if (message.owner !== 'user') return;
    const text = typeof message.text === 'string' ? message.text.trim() : '';
    if (!text) return;
    if (this.committedText === text) {
      this.committedText = null;
      return;
    }
    this.commitUserTurn(text);
  }

  private commitUserTurn(text: string): void {
    this.turnId++;
    this.stats.userTurns++;
    if (this.pending && this.pending.turnId === null) this.pending.turnId = this.turnId;
    if (this.botState === 'listening') this.setState('thinking');
    this.sendTranscript('user', text);
  }

  /** The words of a bot turn still playing when the session ends (sent before `session-ended`). */
  flush(): void {
    if (this.botTurnOpen || this.botOutput) this.endBotTurn(true);
  }

  private sendTranscript(owner: 'user' | 'bot', text: string): void {
    const key = `${this.turnId}\u0000${owner}\u0000${text}`;
    if (key === this.lastTranscriptKey) return;
    this.lastTranscriptKey = key;
    this.stats.transcriptTurns++;
    if (owner === 'bot') this.stats.botTurns++;
    this.send({ type: 'transcript-turn', owner, text, final: true, turn_id: this.turnId });
  }

  onFramePushed(event: FramePushed): void {
    if (this.closed || event.direction !== 'downstream') return;
    const { frame: f, source, timestampMs: at } = event;
    const taps = this.options.taps;
    if (source === (taps.turns ?? taps.vad)) {
      if (f.type === 'bot-pause') {
        this.send({ type: 'bot-paused' });
      } else if (f.type === 'bot-pause-ended') {
        if (f.outcome === 'resumed') this.send({ type: 'bot-resumed', reason: f.reason === 'backchannel' ? 'backchannel' : 'no_words', text: f.text });
        else this.send({ type: 'bot-interrupted', reason: f.reason === 'long_speech' ? 'long_speech' : 'words', text: f.text });
      } else if (f.type === 'user-started-speaking') {
        this.finalSinceUserStart = null;
        this.send({ type: 'user-started-speaking' });
      } else if (f.type === 'user-stopped-speaking') {
        this.pending = {
          userStoppedAt: at,
          endOfTurnMs: f.endOfTurnMs ?? null,
          decision: f.decision ?? null,
          preemptive: false,
          finalAt: this.finalSinceUserStart,
          llmTtfbMs: null,
          ttsTtfbMs: null,
          firstTtsAudioAt: null,
          firstAvatarAudioAt: null,
          turnId: null,
        };
        this.send({ type: 'user-stopped-speaking' });
      }
      return;
    }
    if (source === taps.stt) {
      if (f.type === 'transcription') {
        if (f.final) {
          this.finalSinceUserStart = at;
          if (this.pending && this.pending.turnId === null) this.pending.finalAt = at;
        }
        this.send({ type: 'user-transcription', text: f.text, final: f.final, timestamp: new Date().toISOString(), user_id: this.options.userId() });
      }
      return;
    }
    if (source === taps.user && f.type === 'reply-decision') {
      this.decideReply(f.replyId, f.use, f.text);
      return;
    }
    if (source === taps.llm) {
      const held = this.heldReply && !this.heldReply.ended ? this.heldReply : null;
      if (f.type === 'reply-start') {
        const early = this.earlyDecisions.get(f.replyId);
        this.earlyDecisions.delete(f.replyId);
        // Used already: its messages go out live. Discarded already: dropped as they come.
        if (early !== true) this.heldReply = { replyId: f.replyId, messages: [], thinking: false, ended: false, drop: early === false };
      } else if (f.type === 'reply-end') {
        // Its messages stay held until the decision (decideReply); what follows is not held.
        if (this.heldReply?.replyId === f.replyId) {
          this.heldReply.ended = true;
          if (this.heldReply.drop) this.heldReply = null;
        }
      } else if (f.type === 'llm-text') {
        if (!f.text) return;
        if (held) {
          if (!held.drop) held.messages.push({ type: 'bot-llm-text', text: f.text });
        } else this.send({ type: 'bot-llm-text', text: f.text });
      } else if (f.type === 'llm-response-start') {
        if (held) held.thinking = true;
        else if (this.botState === 'listening') this.setState('thinking');
      } else if (f.type === 'metrics') {
        // Its own: metrics frames of the processors before it (the STT's ttfb) pass it too.
        for (const m of f.data) if (m.kind === 'ttfb' && m.processor === taps.llm && this.pending && this.pending.llmTtfbMs === null) this.pending.llmTtfbMs = m.valueMs;
      }
      return;
    }
    if (source === taps.tts) {
      if (f.type === 'tts-audio') {
        if (f.pcm.length > 0 && this.pending && this.pending.firstTtsAudioAt === null) this.pending.firstTtsAudioAt = at;
      } else if (f.type === 'metrics') {
        // Its own: the LLM's (and the STT's) metrics frames pass the TTS, and come first.
        for (const m of f.data) if (m.kind === 'ttfb' && m.processor === taps.tts && this.pending && this.pending.ttsTtfbMs === null) this.pending.ttsTtfbMs = m.valueMs;
      }
      return;
    }
    if (source === taps.avatar) {
      if (f.type === 'output-audio' && this.pending && this.pending.firstAvatarAudioAt === null) this.pending.firstAvatarAudioAt = at;
      return;
    }
    if (source === taps.output) this.fromOutput(f, at);
  }

  private fromOutput(f: FramePushed['frame'], at: number): void {
    switch (f.type) {
      case 'bot-started-speaking':
        this.botTurnOpen = true;
        this.playbackDry = false;
        this.send({ type: 'bot-started-speaking' });
        this.setState('speaking');
        this.reportLatency(at);
        return;
      case 'tts-text':
        if (!f.text.trim()) return;
        this.botOutput = this.botOutput ? `${this.botOutput} ${f.text.trim()}` : f.text.trim();
        this.send({ type: 'bot-output', text: this.botOutput, final: false });
        return;
      case 'tts-stopped':
        this.botTurnOver = true;
        // Played out already (a loaded machine: the last audio played before this frame reached
        // the output): the turn ends now, not merged into the next one.
        if (this.botTurnOpen && this.playbackDry) {
          this.endBotTurn(false);
          this.setState('listening');
        }
        return;
      case 'interruption':
        if (this.botTurnOpen) this.endBotTurn(true);
        if (this.botState === 'speaking' || this.botState === 'thinking') this.setState('listening');
        return;
      case 'bot-stopped-speaking':
        this.playbackDry = true;
        this.send({ type: 'bot-stopped-speaking' });
        if (this.botTurnOpen && this.botTurnOver) this.endBotTurn(false);
        // Playback ran dry in the middle of a turn: more is coming.
        this.setState(this.botTurnOpen ? 'thinking' : 'listening');
        return;
      default:
        return;
    }
  }

  /** A preemptive reply was used (its user turn is committed now, its text goes out) or discarded. */
  private decideReply(replyId: string, use: boolean, text: string): void {
    const held = this.heldReply?.replyId === replyId ? this.heldReply : null;
    if (held) {
      if (held.ended || use) this.heldReply = null;
      else held.drop = true;
    } else {
      this.earlyDecisions.set(replyId, use);
      if (this.earlyDecisions.size > 32) this.earlyDecisions.delete(this.earlyDecisions.keys().next().value!);
    }
    if (!use) return;
    if (this.pending && this.pending.turnId === null) this.pending.preemptive = true;
    this.committedText = text;
    this.commitUserTurn(text);
    if (held?.thinking && this.botState === 'listening') this.setState('thinking');
    for (const m of held?.messages ?? []) this.send(m);
  }

  private endBotTurn(interrupted: boolean): void {
    const spoken = this.botOutput;
    this.botTurnOpen = false;
    this.botTurnOver = false;
    this.botOutput = '';
    this.send({ type: 'bot-tts-stopped', interrupted });
    if (spoken) this.sendTranscript('bot', spoken);
  }

  /** The first bot audio after a committed user turn closes that turn's latency report. */
  private reportLatency(at: number): void {
    const p = this.pending;
    if (!p || p.turnId === null) return;
    this.pending = null;
    const total = Math.max(0, Math.round(at - p.userStoppedAt));
    this.stats.latenciesMs.push(total);
    const report: LatencyReport = {
      turn_id: p.turnId,
      user_stopped_to_bot_audio_ms: total,
      turn_decision: p.decision,
      preemptive: p.preemptive,
      stages: {
        vad_stop_ms: this.options.vadStopMs,
        end_of_turn_ms: p.endOfTurnMs,
        stt_ms: p.finalAt === null ? null : Math.max(0, Math.round(p.finalAt - p.userStoppedAt)),
        llm_ttfb_ms: p.llmTtfbMs === null ? null : Math.round(p.llmTtfbMs),
        tts_ttfb_ms: p.ttsTtfbMs === null ? null : Math.round(p.ttsTtfbMs),
        avatar_ms: p.firstTtsAudioAt !== null && p.firstAvatarAudioAt !== null ? Math.max(0, Math.round(p.firstAvatarAudioAt - p.firstTtsAudioAt)) : null,
      },
    };
    this.send({ type: 'latency-report', ...report });
  }
}

/** Why a client message was ignored (logged by the runner). */
export type ClientMessageRejection = { readonly ignored: true; readonly reason: string };

/**
 * Reads one client message (a room `client_message` payload). Unknown types and malformed fields
 * are not errors the client is told about: the message is ignored with a reason (the vocabulary
 * grows, and an older bot must not break a newer client). Never throws.
 */
export function parseClientMessage(value: unknown): ClientMessage | ClientMessageRejection {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return { ignored: true, reason: 'not a JSON object' };
  const m = value as Record<string, unknown>;
  switch (m.type) {
    case 'client-ready': {
      const version = typeof m.version === 'string' ? m.version.slice(0, 32) : '';
      const about = m.about && typeof m.about === 'object' && !Array.isArray(m.about) ? (m.about as Record<string, unknown>) : undefined;
      return about ? { type: 'client-ready', version, about } : { type: 'client-ready', version };
    }
    case 'append-system-context': {
      if (typeof m.text !== 'string' || !m.text.trim()) return { ignored: true, reason: 'append-system-context needs a non-empty `text` string' };
      if (m.text.length > SESSION_MESSAGE_LIMITS.maxContextTextLength) {
        return { ignored: true, reason: `append-system-context text is longer than ${SESSION_MESSAGE_LIMITS.maxContextTextLength} characters` };
      }
      return { type: 'append-system-context', text: m.text };
    }
    case 'hang-up':
      // Any other reason (or none) is a plain hang-up: the vocabulary may grow on the page's side.
      return m.reason === 'ice_failed' ? { type: 'hang-up', reason: 'ice_failed' } : { type: 'hang-up' };
    default:
      return { ignored: true, reason: typeof m.type === 'string' ? `unknown message type \`${m.type.slice(0, 40)}\`` : 'messages need a string `type`' };
  }
}

/** p50 and max of a list of latencies (ms); null values when empty. */
export function latencySummary(values: readonly number[]): { readonly count: number; readonly p50: number | null; readonly max: number | null } {
  if (!values.length) return { count: 0, p50: null, max: null };
  const sorted = [...values].sort((a, b) => a - b);
  return { count: sorted.length, p50: sorted[Math.floor((sorted.length - 1) / 2)]!, max: sorted[sorted.length - 1]! };
}
