/**
 * Avatar sessions: our face as the avatar of LiveKit Agents (docs/livekit-agents.md). A surface of
 * `buildServer` (`avatarSessions`) with the process's capacity gate; tests build it the same way.
 */
import type { HttpHost } from '../http/http-app.ts';
import type { ServiceCore } from '../services/open-services.ts';
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
  server: Pick<ServiceCore, 'db' | 'storage' | 'registry' | 'services' | 'config' | 'logger'> & Pick<HttpHost, 'api' | 'router'>,
  options: { readonly capacity: CapacityGate; readonly metrics?: AvatarSessionMetrics } & Partial<Pick<AvatarSessionsOptions, 'maxDurationMs' | 'agentWaitMs' | 'keepEndedMs' | 'onFrameLateness' | 'resolver' | 'ca' | 'media'>>,
): MountedAvatarSessions {
  const resolver = createRealtimeResolver({ db: server.db, storage: server.storage, registry: server.registry, services: server.services });
  let sessions: AvatarSessions | undefined;
  // Metrics made by the caller (a server whose /metrics registry exists before this mount) count these sessions' live count through their own reader.
  const metrics = options.metrics ?? createAvatarSessionMetrics(() => sessions?.live ?? 0);
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
