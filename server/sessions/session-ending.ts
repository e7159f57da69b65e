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
