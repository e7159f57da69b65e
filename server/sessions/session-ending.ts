/**
 * How a bot's session ends in the process that ran it, the same on a single server
 * (live-sessions.ts) and on a fleet runner (server/fleet/runner-sessions.ts): once the bot has
 * stopped, its room is closed and this process's slot freed, then the call is recorded. The slot is
 * free before the record is written, so a connect that reads the call as ended finds the slot free
 * too (a burst right after a release was refused server_busy in that window).
 */
import type { SessionOutcome } from '../../agent/session-contract.ts';
import type { RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { SessionStore } from './session-store.ts';

export interface EndingSession {
  readonly sessionId: string;
  readonly callId: string;
  readonly room: { readonly room: string };
  readonly capacity: { release(): void } | null;
}

export async function endSession(
  parts: { readonly rooms: Pick<RoomProvider, 'closeRoom'>; readonly store: Pick<SessionStore, 'finish'>; readonly log: { warn(o: object, m: string): void; error(o: object, m: string): void } },
  session: EndingSession,
  outcome: SessionOutcome,
): Promise<void> {
  await parts.rooms.closeRoom(session.room.room).catch((err) => parts.log.warn({ err, room: session.room.room }, 'room close failed'));
  session.capacity?.release();
  try {
    await parts.store.finish(session.sessionId, session.callId, {
      terminationReason: outcome.terminationReason,
      failureReason: outcome.failureCode ?? null,
      participantCount: outcome.participantCount,
      metadata: { ...outcome.metadata, ...(outcome.failureDetail ? { failure_detail: outcome.failureDetail } : {}) },
    });
  } catch (err) {
    // Its process stops renewing it (it renews only the sessions it still handles): the lease
    // lapses and a reaper ends the call, so the agent's slot is not lost.
    parts.log.error({ err, sessionId: session.sessionId }, 'could not record the end of a session');
  }
}

/**
 * How often a process checks that the leases of the sessions it runs were renewed in time (a
 * quarter of a second: a stalled heartbeat is noticed well within the lease's margin).
 */
export const LEASE_WATCH_INTERVAL_MS = 250;

/** What the lease watch needs of a session: until when its lease holds on this process's monotonic clock. */
export interface LeasedSession {
  readonly sessionId: string;
  readonly running: unknown;
  readonly finished: unknown;
  readonly heldUntil: number;
  /** Set when the watch stopped it: a bot's stop takes a while, and it is asked once. */
  leaseLost?: boolean;
}

/**
 * The running sessions whose lease this process could not renew in time (`now` past `heldUntil`,
 * the database unreachable or stalled while visitors still reach the process). Another process's
 * reaper ends their calls and frees their slots once the lease lapsed, and new sessions are then
 * admitted in their place: their bots must stop (`runner_lost`), on a single server
 * (live-sessions.ts) and on a fleet runner (runner-sessions.ts) alike. Each is returned once
 * (marked `leaseLost`): its stop is asked for once however long the bot takes to stop.
 */
export function overdueLeases<S extends LeasedSession>(sessions: Iterable<S>, now: number): S[] {
  const overdue = [...sessions].filter((s) => s.running && !s.finished && !s.leaseLost && s.heldUntil < now);
  for (const s of overdue) s.leaseLost = true;
  return overdue;
}
