/** Mounts the real-time face-model WebSocket on a REST server's HTTP server. */
import type { AppServer } from '../app.ts';
import { attachRealtime, type AvatarPublisher, type RealtimeEndpoint } from './realtime-endpoint.ts';
import { createRealtimeResolver } from './realtime-resolver.ts';

export interface MountRealtimeOptions {
  readonly maxSessions?: number;
  readonly publishAvatar?: AvatarPublisher;
  /** Close connections silent for this long (default 5 min; clients ping to stay open). */
  readonly idleTimeoutMs?: number;
}

export function mountRealtime(server: Pick<AppServer, 'httpServer' | 'db' | 'storage' | 'registry' | 'services' | 'logger'>, options: MountRealtimeOptions = {}): RealtimeEndpoint {
  return attachRealtime(server.httpServer, {
    registry: server.registry,
    resolver: createRealtimeResolver(server),
    maxSessions: options.maxSessions,
    publishAvatar: options.publishAvatar,
    idleTimeoutMs: options.idleTimeoutMs,
    log: (event, details) => server.logger.info(details, event),
  });
}

export * from './realtime-endpoint.ts';
export { createRealtimeResolver } from './realtime-resolver.ts';
