/**
 * Mounts the Session API on a REST server: `POST /v1/public/agents/connect` and
 * `POST /v1/public/agents/connect/{room}` (documented in /v1/openapi.json), with the lease
 * heartbeat and reaper of this process. The room provider and the bot runner are passed in:
 * the server chooses them (embedded rooms, or LiveKit rooms when the deployment configures a
 * LiveKit server, and the in-process BotRunner: embedded-sessions.ts).
 */
import type { SessionRunner } from '../../agent/session-contract.ts';
import type { RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { AppServer } from '../app.ts';
import { LiveSessions, type BotCapacity, type LiveSessionsOptions } from './live-sessions.ts';
import { mountSessionRoutes, SESSION_ROUTE_SPECS } from './session-routes.ts';

export interface MountSessionsOptions {
  readonly rooms: RoomProvider;
  readonly runner: SessionRunner;
  readonly capacity?: BotCapacity;
  readonly lease?: LiveSessionsOptions['lease'];
  readonly runnerId?: string;
  readonly shutdownTimeoutMs?: number;
  readonly onDecision?: LiveSessionsOptions['onDecision'];
}

export function mountSessions(server: Pick<AppServer, 'db' | 'router' | 'api' | 'logger' | 'services' | 'baseUrl'>, options: MountSessionsOptions): LiveSessions {
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
    ...(options.onDecision ? { onDecision: options.onDecision } : {}),
  });
  server.api.specs.push(...SESSION_ROUTE_SPECS);
  // These routes read their own bodies: the Session API error shape, and beacons (text/plain) on release.
  for (const spec of SESSION_ROUTE_SPECS) server.api.acceptBody(server.router, spec.method, spec.path, 'raw');
  mountSessionRoutes(server.router, sessions, server.logger, (ctx) => server.baseUrl(ctx));
  sessions.start();
  return sessions;
}
