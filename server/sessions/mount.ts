/**
 * Mounts the Session API on a REST server: `POST /v1/public/agents/connect` and
 * `POST /v1/public/agents/connect/{room}` (documented in /v1/openapi.json), with the lease
 * heartbeat and reaper of this process. The room provider and the bot runner are passed in:
 * the server chooses them (embedded rooms, or LiveKit rooms when the deployment configures a
 * LiveKit server, and the in-process BotRunner: embedded-sessions.ts).
 */
import type { SessionRunner } from '../../agent/session-contract.ts';
import type { RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { HttpHost } from '../http/http-app.ts';
import type { ServiceCore } from '../services/open-services.ts';
import { LiveSessions, type BotCapacity, type LiveSessionsOptions } from './live-sessions.ts';
import { mountSessionRoutes } from './session-routes.ts';

export interface MountSessionsOptions {
  readonly rooms: RoomProvider;
  readonly runner: SessionRunner;
  readonly capacity?: BotCapacity;
  readonly lease?: LiveSessionsOptions['lease'];
  readonly runnerId?: string;
  readonly shutdownTimeoutMs?: number;
  readonly startTimeoutMs?: number;
  readonly onDecision?: LiveSessionsOptions['onDecision'];
}

export function mountSessions(server: Pick<ServiceCore, 'db' | 'logger' | 'services'> & Pick<HttpHost, 'router' | 'api'>, options: MountSessionsOptions): LiveSessions {
  const sessions = new LiveSessions({
    db: server.db,
    agents: server.services.agents,
    logger: server.logger,
    rooms: options.rooms,
    runner: options.runner,
    ...(options.capacity ? { capacity: options.capacity } : {}),
    ...(options.lease ? { lease: options.lease } : {}),
    ...(options.runnerId ? { runnerId: options.runnerId } : {}),
    ...(options.shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.shutdownTimeoutMs } : {}),
    ...(options.startTimeoutMs !== undefined ? { startTimeoutMs: options.startTimeoutMs } : {}),
    ...(options.onDecision ? { onDecision: options.onDecision } : {}),
  });
  mountSessionRoutes(server.api, server.router, sessions, server.logger);
  sessions.start();
  return sessions;
}
