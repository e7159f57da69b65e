/**
 * The widget's DOM events (spec "Widget DOM events" and telemetry events) and the values the spec
 * leaves open: connection and bot states, the outcome vocabulary with its fault domains, and the
 * shapes of LatencyReport and ConnectionTimingReport. Documented in docs/widget.md.
 */

/** Events dispatched on `window` (not on the element). Every other event is on the element. */
export const WINDOW_EVENTS = ['svcToolCall', 'LatencyReport', 'ConnectionTimingReport', 'SvcSessionOutcome'] as const;
export type WindowEventName = (typeof WINDOW_EVENTS)[number];

/**
 * Transport state, in the order a call visits it:
 * disconnected -> requesting (microphone, then the connect request and any queue wait)
 * -> connecting (signalling joined, peer connection negotiating) -> connected (ICE connected)
 * -> ready (bot-ready received and the first video frame shown) -> disconnected.
 * Any failure or ending goes straight back to `disconnected`.
 */
export type ConnectionState = 'disconnected' | 'requesting' | 'connecting' | 'connected' | 'ready' | 'reconnecting';

/**
 * Bot lifecycle: `disconnected` (no bot) -> `initializing` (a call is being set up) -> the bot's own
 * `listening` / `thinking` / `speaking` (from its bot-state messages; bot-ready means `listening`)
 * -> `ended` (a live session ended) or back to `disconnected` (the attempt failed before the bot
 * was ready). A new call starts again at `initializing`.
 */
export type WidgetBotState = 'disconnected' | 'initializing' | 'listening' | 'thinking' | 'speaking' | 'ended';

export type FaultDomain = 'client_env' | 'ojin' | 'backend' | 'unknown';
export type OutcomePhase = 'connect' | 'session';

/**
 * Every `outcome` the widget emits, with its phase(s) and default fault domain (docs/widget.md).
 * Normal endings are `unknown`.
 */
export const OUTCOMES = {
  // phase connect
  success: 'unknown',
  mic_permission_denied: 'client_env',
  mic_unavailable: 'client_env',
  unsupported_browser: 'client_env',
  agent_unavailable: 'backend',
  not_allowed: 'backend',
  /** The Session API refused the page's settings (400: an agent-id that is no uuid, a client-user-ref over 256 characters). */
  invalid_settings: 'backend',
  queue_timeout: 'backend',
  service_error: 'ojin',
  network_error: 'unknown',
  connection_failed: 'unknown',
  connection_timeout: 'unknown',
  /** No media path (ICE) within the setup timeout, or the server had none to offer. */
  ice_failed: 'unknown',
  cancelled: 'unknown',
  // phase session (ended_by_visitor, element_removed, page_closed, transport_lost also end a connect phase as `cancelled`/failures)
  ended_by_visitor: 'unknown',
  ended_by_agent: 'unknown',
  time_limit_reached: 'unknown',
  element_removed: 'unknown',
  page_closed: 'unknown',
  transport_lost: 'unknown',
  agent_error: 'ojin',
  service_shutdown: 'ojin',
} as const satisfies Record<string, FaultDomain>;
export type Outcome = keyof typeof OUTCOMES;

export interface SessionOutcomeDetail {
  readonly outcome: Outcome;
  readonly phase: OutcomePhase;
  readonly faultDomain: FaultDomain;
  /** Present only once a session exists (the connect request succeeded). */
  readonly sessionId?: string;
  readonly agentId: string;
  readonly instanceId: string;
  /** Status of the last connect response; null when none arrived. */
  readonly httpStatus: number | null;
  /** connect: since the start of the attempt (the click); session: since the session became ready. */
  readonly elapsedMs: number;
  readonly widgetVersion: string;
}

export interface ToolCallDetail {
  readonly function_name: string;
  readonly tool_call_id: string;
  readonly arguments: Record<string, unknown>;
}

/** One bot turn: the page's own measurement and the bot's stage timings (ms; null = not measured). */
export interface LatencyReportDetail {
  readonly instanceId: string;
  readonly sessionId: string;
  readonly agentId: string;
  readonly turnId: number;
  /** Visitor stopped speaking (as heard by the page's microphone) -> first bot audio heard at the page. */
  readonly userStoppedToBotAudioHeardMs: number | null;
  /** The bot's own figure: its VAD stop -> first bot audio written to the room. */
  readonly userStoppedToBotAudioMs: number | null;
  /** What ended the visitor's turn (the bot's turn analyzer: `complete (text:closed)`, ...); null when not reported. */
  readonly turnDecision: string | null;
  /** The answer was made during the visitor's pause (a preemptive reply). */
  readonly preemptive: boolean;
  readonly stages: {
    readonly vadStopMs: number | null;
    /** The bot's end-of-turn wait after its VAD stop. */
    readonly endOfTurnMs: number | null;
    readonly sttMs: number | null;
    readonly llmTtfbMs: number | null;
    readonly ttsTtfbMs: number | null;
    readonly avatarMs: number | null;
  };
}

/** Points of the connection setup, `performance.now()` ms of the page (null = did not happen). */
export interface ConnectionTimingMarks {
  readonly scriptStart: number;
  readonly startClicked: number;
  readonly microphoneReady: number | null;
  /** The connect request that was admitted (after any queue wait). */
  readonly connectRequest: number | null;
  readonly connectResponse: number | null;
  readonly signallingJoined: number | null;
  readonly iceConnected: number | null;
  readonly firstVideoFrame: number | null;
  readonly botReady: number | null;
}

export interface ConnectionTimingReportDetail {
  readonly instanceId: string;
  readonly sessionId: string;
  readonly agentId: string;
  readonly marks: ConnectionTimingMarks;
  /** Durations between the marks (ms). */
  readonly durations: {
    readonly microphoneMs: number | null;
    readonly queuedMs: number;
    readonly connectRequestMs: number | null;
    readonly signallingMs: number | null;
    readonly iceMs: number | null;
    readonly firstVideoFrameMs: number | null;
    readonly botReadyMs: number | null;
    /** Start click -> ready (bot ready and first frame shown). */
    readonly totalMs: number;
  };
  /** Connect requests sent (more than one after queueing). */
  readonly connectAttempts: number;
}
