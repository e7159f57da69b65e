/**
 * The vendor-neutral speech-to-speech (S2S) contract: an external provider runs the whole
 * conversation (hearing, thinking, speaking) and we only add the face. A plugin implements
 * `S2SService` with its vendor's protocol; `S2SProcessor` maps the events onto the frames the
 * rest of the pipeline already understands, so the avatar, the output, the session messages and
 * the call history work the same in `svc` and `third_party` mode.
 *
 * User audio goes in (`sendAudio`, at the rate the provider asked for); events come out: bot
 * audio by turn, user and bot transcripts, user speaking state, provider-side interruptions,
 * usage. What the user actually heard of an interrupted turn flows back through `interrupted`.
 */
import type { Observable } from 'rxjs';
import { ProviderError } from '../../core/provider-error.ts';

/** Identifies one bot turn (one provider response) across events. */
export interface S2STurnRef {
  /** Unique within the connection: OpenAI response id, ElevenLabs `el-<event_id>`. */
  readonly turnId: string;
  /** Provider item the audio belongs to, when the provider has one (OpenAI conversation item). */
  readonly itemId?: string;
}

export type S2SEvent =
  /** The provider accepted the session. `outputSampleRate` is the rate of `bot-audio`. */
  | { readonly type: 'ready'; readonly conversationId?: string; readonly inputSampleRate: number; readonly outputSampleRate: number }
  | { readonly type: 'user-started-speaking' }
  | { readonly type: 'user-stopped-speaking' }
  /** What the user said (interim `final: false` when the provider streams them). */
  | { readonly type: 'user-transcript'; readonly text: string; readonly final: boolean }
  /** The first event of a bot turn: everything until `bot-turn-ended` is one face turn. */
  | { readonly type: 'bot-turn-started'; readonly turn: S2STurnRef }
  | { readonly type: 'bot-audio'; readonly turn: S2STurnRef; readonly pcm: Int16Array; readonly sampleRate: number }
  /** Bot words as the provider produces them (`final` carries the turn's whole text). */
  | { readonly type: 'bot-transcript'; readonly turn: S2STurnRef; readonly text: string; readonly final: boolean }
  /** The provider has sent all of this turn's audio (playout may continue for a while). */
  | { readonly type: 'bot-turn-ended'; readonly turn: S2STurnRef }
  /**
   * The provider stopped the bot because the user spoke over it: the face must stop now and no
   * more audio of `turn` may be played (the plugin already drops what the vendor says is stale).
   */
  | { readonly type: 'interrupted'; readonly turn?: S2STurnRef }
  /** Usage counters (tokens, audio ms), added up by the call history. */
  | { readonly type: 'usage'; readonly counters: Readonly<Record<string, number>> }
  /** A provider error that does not end the connection (e.g. a refused client event). */
  | { readonly type: 'warning'; readonly code: string; readonly message: string };

/** A past exchange, replayed into a fresh connection after a drop where the provider allows it. */
export interface S2SHistoryEntry {
  readonly role: 'user' | 'assistant';
  readonly text: string;
}

export interface S2SConnectOptions {
  /** The provider key, decrypted for this session only. Never logged, never sent to a client. */
  readonly apiKey: string;
  /** `sts_config_id`: the OpenAI model, the ElevenLabs agent id, ... */
  readonly configId: string | null;
  /** `provider_config`, free-form, validated by the plugin. */
  readonly providerConfig: Readonly<Record<string, unknown>>;
  /** The agent's system prompt, where the provider accepts one per session. */
  readonly instructions?: string | null;
  /** The agent's spoken language (`en`, `fr`, `pt-BR`). */
  readonly language?: string;
  /** The agent's voice_id, where the provider accepts one per session. */
  readonly voiceId?: string | null;
  /**
   * Whether the provider may cut the bot when the user speaks: the start frame's
   * `allowInterruptions` (the agent's `behaviour.allow_interruption`), passed on by the processor.
   */
  readonly allowInterruptions: boolean;
  /**
   * `starts_conversation`: the bot speaks first. A non-empty text is the line to say, where the
   * provider takes one per session; null/undefined: wait for the user (or the provider's own
   * configured first message).
   */
  readonly greeting?: string | null;
  /**
   * A reconnect of a conversation under way: the provider must not open it again (no greeting,
   * and no first message of its own where it can be overridden). `greeting` is null then.
   */
  readonly resumed?: boolean;
  /** Earlier turns, on a reconnect. */
  readonly history?: readonly S2SHistoryEntry[];
  readonly signal?: AbortSignal;
}

/** One live provider conversation. */
export interface S2SConnection {
  /** Sample rate `sendAudio` expects (mono int16). */
  readonly inputSampleRate: number;
  sendAudio(pcm: Int16Array): void;
  /**
   * The bot was cut while playing `turn` (by the provider or by us): `playedMs` is how much of
   * its audio the user really heard (the face's playout), so the provider can forget the rest.
   * `cancelResponse` is true when the cut came from our side and the provider may still be
   * generating.
   */
  interrupted(turn: S2STurnRef, playedMs: number, cancelResponse: boolean): void;
  /**
   * Adds system context for later turns without making the bot answer (the client's
   * `append-system-context`). Optional: a provider without the notion drops it.
   */
  addContext?(text: string): void;
  /** Completes when closed by us; errors with an `S2SError` when the connection fails. */
  readonly events: Observable<S2SEvent>;
  close(): Promise<void>;
}

export interface S2SService {
  readonly name: string;
  /** Opens a conversation; rejects with an `S2SError` (`auth_failed`, `config_not_found`, ...). */
  connect(options: S2SConnectOptions): Promise<S2SConnection>;
}

/**
 * Why a provider conversation failed. The processor maps each to an error frame code
 * (`sts_<code>`) the bot runner can turn into the call's failure detail.
 * - `auth_failed`: the provider refused the key (401/403, or its own auth error)
 * - `config_not_found`: `sts_config_id` names no model / agent the key can use
 * - `bad_config`: the provider refused the session settings (provider_config)
 * - `connect_failed`: the provider could not be reached
 * - `timeout`: it did not answer in time
 * - `connection_lost`: an open conversation dropped
 * - `provider_error`: the provider reported a fatal error of its own
 */
export type S2SErrorCode = 'auth_failed' | 'config_not_found' | 'bad_config' | 'connect_failed' | 'timeout' | 'connection_lost' | 'provider_error';

export class S2SError extends ProviderError<S2SErrorCode> {
  constructor(code: S2SErrorCode, message: string, status?: number) {
    // A new connection cannot fix a refused key or configuration; anything else may be fixed.
    super(code, message, { status, retryable: !(code === 'auth_failed' || code === 'config_not_found' || code === 'bad_config') });
  }

  /** Errors that a new connection cannot fix: the session ends at once (`!retryable`). */
  get permanent(): boolean {
    return !this.retryable;
  }
}
