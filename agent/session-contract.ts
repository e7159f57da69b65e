/**
 * The contract between the Session API (server/sessions: admission, leases, call history) and the
 * bot runner (agent/: one agent's bot in one room). The server admits a session, creates its room
 * and hands both to a `SessionRunner`; the runner runs the bot until something ends it and reports
 * how it ended; the server writes the call record and frees the slot. Nothing here knows HTTP or
 * the database, so runners can later live in other processes behind the same interface.
 */
import type { AvatarRoom } from '../transports/webrtc/room-provider.ts';
import type { AgentRuntimeRecord } from './agent-pipeline.ts';

/** Every timeout of a live session, in one place (documented in docs/sessions.md). */
export const SESSION_TIMEOUTS = {
  /**
   * No visitor's peer connection was connected within this time after admission: the session
   * ends (`join_timeout`). Joining the signalling is not enough: a page that joins and never
   * completes WebRTC must not hold the session (and the agent's concurrency slot) forever.
   */
  joinDeadlineMs: 60_000,
  /**
   * The visitor left (peer connection gone, signalling socket closed): they may come back within
   * this time (a network switch, a reload) before the session ends (`client_left`).
   */
  departureGraceMs: 20_000,
  /** After `client-ready`, how long the greeting waits for the visitor's audio subscription. */
  subscribeWaitMs: 5_000,
  /**
   * A visitor whose peer connection is connected but who never sends `client-ready` (a client
   * that does not speak the session protocol) gets the conversation after this long anyway.
   */
  clientReadyWaitMs: 10_000,
  /** Stopping a session (farewell excluded) must finish within this; then it is torn down hard. */
  stopTimeoutMs: 5_000,
  /**
   * Starting a session's bot (its pipeline, face session, room connection) must finish within
   * this; past it the start is given up (`bot_start_failed`, failure `start_timeout`), its slots
   * freed, and a start that completes later is stopped at once. A cold start takes 1 to 4 s on 2
   * cores; a start that hangs (a face worker or a bot host that never answers) held the session,
   * the agent's slot and a start slot until the process restarted.
   */
  startTimeoutMs: 30_000,
  /**
   * `session_limit_seconds` counts from admission, whatever the session is doing. A conversation
   * running at that moment is asked to end with its farewell and stopped if it still runs this
   * much later; a session without a conversation ends at once.
   */
  limitFarewellMs: 15_000,
} as const;

/**
 * Why a session ended (AgentCall.termination_reason). Decision, documented in docs/sessions.md.
 * - `client_released`: `POST /v1/public/agents/connect/{room}` (the widget's hang-up or tab close)
 * - `client_hung_up`: the client sent `hang-up` over the room
 * - `client_left`: the visitor left and did not come back within the departure grace
 * - `join_timeout`: no visitor's peer connection connected within the join deadline (nobody
 *   joined, or a visitor joined the signalling and never completed WebRTC)
 * - `session_limit_reached`: the agent's `session_limit_seconds`, counted from admission
 * - `max_duration_reached`: the behaviour's `max_conversation_duration_seconds`
 * - `agent_ended`: the agent hung up (`end_call` tool)
 * - `server_shutdown`: the process holding the session was stopped (SIGTERM)
 * - `runner_lost`: the process holding the session died; its lease expired and a reaper ended it
 * - `pipeline_error`: a fatal error in the bot (STT/LLM/TTS/face/room)
 * - `room_creation_failed`, `bot_start_failed`: the session never started (admitted, then failed)
 * - `ice_failed`: a visitor joined but no media path could be made (its page reported `ice_failed`
 *   in its `hang-up`, or every visitor's peer connection failed before one ever connected);
 *   `failure_reason` says more when the server knows (`media_ports_exhausted`, `turn_unavailable`)
 */
export const TERMINATION_REASONS = [
  'client_released', 'client_hung_up', 'client_left', 'join_timeout', 'session_limit_reached', 'max_duration_reached',
  'agent_ended', 'server_shutdown', 'runner_lost', 'pipeline_error', 'room_creation_failed', 'bot_start_failed', 'ice_failed',
] as const;
export type TerminationReason = (typeof TERMINATION_REASONS)[number];

/** AgentCall.status: `active` while live; `completed` for normal endings; `failed` otherwise. */
export const CALL_STATUSES = ['active', 'completed', 'failed'] as const;
export type CallStatus = (typeof CALL_STATUSES)[number];

/** Reasons that make a call `failed` (the rest are `completed`). */
export const FAILED_TERMINATIONS: ReadonlySet<TerminationReason> = new Set(['join_timeout', 'runner_lost', 'pipeline_error', 'room_creation_failed', 'bot_start_failed', 'ice_failed']);

/** What the server hands the runner for one admitted session. */
export interface SessionStart {
  readonly sessionId: string;
  readonly callId: string;
  readonly agent: AgentRuntimeRecord;
  readonly clientUserRef: string | null;
  /** The room the server created for this session (embedded or LiveKit). */
  readonly room: AvatarRoom;
  /**
   * `third_party` agents: the speech-to-speech provider's key, decrypted for this session only
   * (it goes to the provider plugin and nowhere else: no log, no frame, no client message).
   */
  readonly stsApiKey?: string | null;
}

/** How a session ended, as the runner saw it (the server writes it into the call record). */
export interface SessionOutcome {
  readonly terminationReason: TerminationReason;
  /** Human-readable detail for failed sessions (e.g. the fatal error's message); null otherwise. */
  readonly failureDetail: string | null;
  /**
   * A machine-readable failure code for failed sessions when the runner knows better than the
   * termination reason (e.g. a provider's `provider_auth_failed`); default: the termination reason.
   */
  readonly failureCode?: string;
  /** Peak number of visitors in the room at once (the bot excluded). */
  readonly participantCount: number;
  /** Worth keeping in AgentCall.metadata: turns, latency summary, first-frame time, ... */
  readonly metadata: Readonly<Record<string, unknown>>;
}

/** One running bot. */
export interface RunningSession {
  readonly sessionId: string;
  /** Settles once, when the session has ended and everything it started is stopped. */
  readonly ended: Promise<SessionOutcome>;
  /**
   * Ends the session for `reason` (release, shutdown, lease lost): tells the client
   * (`session-ended`), stops the pipeline, unpublishes, leaves no timer or peer behind. Idempotent:
   * later calls return the first outcome.
   */
  stop(reason: TerminationReason): Promise<SessionOutcome>;
}

export interface SessionRunner {
  /**
   * Starts the bot of one session in its room. Resolves once the bot is running (waiting for the
   * visitor); rejects when it cannot start (the server then answers `orchestrator_error`).
   */
  start(session: SessionStart): Promise<RunningSession>;
}
