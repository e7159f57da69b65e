/**
 * The session message protocol between a bot and the clients in its room (widget, SDKs), modelled
 * on RTVI. Bot -> client messages travel as the embedded room's `app_message` payload (LiveKit:
 * data packets on topic `svc.session`); client -> bot messages as the room's `client_message`.
 * Every message is a flat JSON object with a `type`; fields are snake_case. Unknown types are
 * ignored by both sides (the vocabulary grows). Full description: docs/session-messages.md.
 */

export const SESSION_PROTOCOL_VERSION = '1.0.0';

/**
 * The bot's identity in a LiveKit room the service created for a session: the only participant
 * whose session messages the widget accepts (another participant of the room cannot end the call
 * or call the page's client tools).
 */
export const livekitBotIdentity = (room: string): string => `avatar-${room}`;

/** `bot-state` values, in the order a normal turn visits them. */
export const BOT_STATES = ['initializing', 'listening', 'thinking', 'speaking', 'ended'] as const;
export type BotState = (typeof BOT_STATES)[number];

/** Per-turn latency, all in ms; a stage is null when it did not happen (e.g. no STT final). */
export interface LatencyReport {
  readonly turn_id: number;
  /** User stopped speaking (VAD stop) -> first bot audio written to the room. */
  readonly user_stopped_to_bot_audio_ms: number;
  /** What ended the turn: the turn analyzer's decision and reason (`complete (text:closed)`), null when not known. */
  readonly turn_decision: string | null;
  /** The answer was a preemptive reply, made during the user's pause (its LLM and TTS stages are null then). */
  readonly preemptive: boolean;
  readonly stages: {
    /** VAD's own stop delay (the short pause it waits before reporting that speech stopped). */
    readonly vad_stop_ms: number | null;
    /** VAD stop -> end of the turn: the turn analyzer's wait (0 when it judged the turn complete at once). */
    readonly end_of_turn_ms: number | null;
    /** VAD stop -> final transcript. */
    readonly stt_ms: number | null;
    /** Transcript -> first LLM token. */
    readonly llm_ttfb_ms: number | null;
    /** First LLM sentence -> first TTS audio. */
    readonly tts_ttfb_ms: number | null;
    /** First TTS audio -> first avatar frame with speech. */
    readonly avatar_ms: number | null;
  };
}

export type BotMessage =
  | { readonly type: 'bot-ready'; readonly version: string; readonly session_id: string; readonly capabilities: { readonly audio_out: boolean; readonly video_out: boolean; readonly audio_in: boolean } }
  | { readonly type: 'bot-state'; readonly state: BotState }
  | { readonly type: 'user-started-speaking' }
  | { readonly type: 'user-stopped-speaking' }
  | { readonly type: 'bot-started-speaking' }
  | { readonly type: 'bot-stopped-speaking' }
  /** Interim (`final: false`) and final user transcripts; `timestamp` ISO 8601. */
  | { readonly type: 'user-transcription'; readonly text: string; readonly final: boolean; readonly timestamp: string; readonly user_id: string }
  /** A raw chunk of the bot's response text as the LLM produces it. */
  | { readonly type: 'bot-llm-text'; readonly text: string }
  /** The cumulative text of the bot's current turn. */
  | { readonly type: 'bot-output'; readonly text: string; readonly final: false }
  /** Visitor sound over the bot paused its speech (audio and face); `bot-resumed` or `bot-interrupted` follows. */
  | { readonly type: 'bot-paused' }
  /** A false interruption: a backchannel, or no words, and the bot goes on from where it stopped. */
  | { readonly type: 'bot-resumed'; readonly reason: 'backchannel' | 'no_words'; readonly text: string }
  /** Real words (or long sound) over the bot: its turn ends (`bot-tts-stopped {interrupted: true}` follows). */
  | { readonly type: 'bot-interrupted'; readonly reason: 'words' | 'long_speech'; readonly text: string }
  /** The current spoken turn ended (`interrupted` when cut by barge-in). */
  | { readonly type: 'bot-tts-stopped'; readonly interrupted: boolean }
  /** One finished, de-duplicated conversational turn (bot text: what was actually spoken). */
  | { readonly type: 'transcript-turn'; readonly owner: 'user' | 'bot'; readonly text: string; readonly final: true; readonly turn_id: number }
  | ({ readonly type: 'latency-report' } & LatencyReport)
  /** A client-mode tool call; the widget dispatches it as the window event `svcToolCall`. */
  | { readonly type: 'tool-call'; readonly function_name: string; readonly tool_call_id: string; readonly arguments: Readonly<Record<string, unknown>> }
  /** The session is ending; sent before the room closes. `reason` is the call's termination_reason. */
  | { readonly type: 'session-ended'; readonly reason: string }
  | { readonly type: 'error'; readonly code: string; readonly message: string; readonly fatal: boolean };

export type ClientMessage =
  /** The client is ready to play the bot's media; the greeting waits for it. */
  | { readonly type: 'client-ready'; readonly version: string; readonly about?: Readonly<Record<string, unknown>> }
  /** Added to the LLM context as a system message for later turns; forces no reply. Max 4,000 characters. */
  | { readonly type: 'append-system-context'; readonly text: string }
  /**
   * The visitor hangs up (the session ends with `client_hung_up`). `reason: 'ice_failed'`: the
   * page gives up because no media path could be made (the session ends with `ice_failed`).
   */
  | { readonly type: 'hang-up'; readonly reason?: 'ice_failed' };

export const SESSION_MESSAGE_LIMITS = {
  /** Longest accepted `append-system-context` text. */
  maxContextTextLength: 4_000,
  /** Largest client message (JSON bytes). */
  maxClientMessageBytes: 16 * 1024,
} as const;
