/**
 * Avatar sessions: our face as the avatar of LiveKit Agents (docs/livekit-agents.md). Mounted by
 * `npm start` (server/main.ts) with the process's capacity gate; tests mount it the same way.
 */
import type { AppServer } from '../app.ts';
import type { CapacityGate } from '../capacity/index.ts';
import { createRealtimeResolver } from '../realtime/realtime-resolver.ts';
import { createAvatarSessionMetrics, type AvatarSessionMetrics } from './avatar-session-metrics.ts';
import { mountAvatarSessionRoutes } from './avatar-session-routes.ts';
import { AvatarSessions, type AvatarSessionsOptions } from './avatar-sessions.ts';

export { AVATAR_SESSION_DEFAULTS, AvatarSessions, type AvatarSessionEndReason, type AvatarSessionInput, type AvatarSessionsOptions } from './avatar-sessions.ts';
export { createAvatarSessionMetrics, type AvatarSessionMetrics } from './avatar-session-metrics.ts';
export { readAvatarTokenClaims, type AvatarTokenClaims } from './livekit-token-claims.ts';

export interface MountedAvatarSessions {
  readonly sessions: AvatarSessions;
  /** Its /metrics series: pass `metrics.metrics` to `createServerMetrics({ extra })`. */
  readonly metrics: AvatarSessionMetrics;
  close(): Promise<void>;
}

export function mountAvatarSessions(
  server: AppServer,
  options: { readonly capacity: CapacityGate } & Partial<Pick<AvatarSessionsOptions, 'maxDurationMs' | 'agentWaitMs' | 'keepEndedMs' | 'onFrameLateness' | 'resolver' | 'ca'>>,
): MountedAvatarSessions {
  const resolver = createRealtimeResolver({ db: server.db, storage: server.storage, registry: server.registry, services: server.services });
  let sessions: AvatarSessions | undefined;
  const metrics = createAvatarSessionMetrics(() => sessions?.live ?? 0);
  sessions = new AvatarSessions({
    ...options,
    registry: server.registry,
    resolveConfig: (principal, configId) => resolver.resolveConfig(principal, configId),
    livekitAllowedRanges: server.config.livekitAllowedRanges,
    metrics,
    logger: server.logger.child({ component: 'avatar-session' }),
  });
  mountAvatarSessionRoutes(server.api, server.router, sessions);
  return { sessions, metrics, close: () => sessions!.close() };
}
