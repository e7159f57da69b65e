/**
 * What a call (call.ts) and its element (element.ts) agree on: the call's settings from the
 * element's attributes, what the call needs from the element (its media elements, its states and
 * events), how a call ended, and the call's timing defaults.
 */
import type { Call } from './call.ts';
import type { ConnectionState, FaultDomain, Outcome, OutcomePhase, WidgetBotState, WindowEventName } from './events.ts';

export const CALL_DEFAULTS = {
  /** Setup timeout (attribute `connect-timeout`, seconds): connect request -> ready. Paused while queued. */
  setupTimeoutMs: 20_000,
  /** Longest total wait in the queue (attribute `queue-timeout`, seconds) before giving up. */
  queueTimeoutMs: 120_000,
  // Waits between queued retries: SESSION_API_DEFAULTS (session-api.ts).
  /**
   * The media path `disconnected` or `failed` after it had connected (LiveKit: reconnecting) for
   * this long ends the call (`transport_lost`); meanwhile the room restarts ICE (embedded: the
   * room client asks the server for it) and the connection state is `reconnecting`.
   */
  iceDisconnectGraceMs: 8_000,
  // Levels, browser voice activity and per-turn latency: METER_DEFAULTS (call-meter.ts).
} as const;

export interface CallSettings {
  readonly endpoint: string;
  readonly agentId: string;
  readonly instanceId: string;
  readonly clientUserRef: string | null;
  readonly authToken: string | null;
  readonly setupTimeoutMs: number;
  readonly queueTimeoutMs: number;
  readonly scriptStart: number;
  readonly startClicked: number;
}

/** What a call needs from its element. */
export interface CallHost {
  readonly video: HTMLVideoElement;
  readonly audio: HTMLAudioElement;
  readonly audioContext: AudioContext | null;
  readonly muted: boolean;
  readonly connectionState: ConnectionState;
  readonly botState: WidgetBotState;
  dispatch(name: string, detail: unknown): void;
  dispatchOnWindow(name: WindowEventName, detail: unknown): void;
  setConnectionState(state: ConnectionState): void;
  setBotState(state: WidgetBotState): void;
  setQueuing(queuing: boolean): void;
  setMicrophonePending(pending: boolean): void;
  setBotSpeaking(speaking: boolean): void;
  /** The browser refused to play the bot's sound (no user gesture): the element offers a button. */
  setSoundBlocked(blocked: boolean): void;
  showVideo(): void;
  callEnded(call: Call, end: CallEnd): void;
}

export interface CallEnd {
  readonly outcome: Outcome;
  readonly phase: OutcomePhase;
  readonly faultDomain: FaultDomain;
}

/** Why the visitor's side ends a call. */
export type LocalEnd = 'visitor' | 'element_removed' | 'page_closed';
