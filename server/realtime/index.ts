/** The real-time face-model WebSocket of a server: `buildServer` puts it in the upgrade table at /realtime. */
import type { CapacityGate } from '../capacity/capacity-gate.ts';
import type { ServiceCore } from '../services/open-services.ts';
import { createRealtimeEndpoint, type AvatarPublisher, type RealtimeEndpoint } from './realtime-endpoint.ts';
import { createRealtimeResolver } from './realtime-resolver.ts';

export interface MountRealtimeOptions {
  /**
   * The process-wide capacity gate, shared with the Session API's bots (create it once at
   * start-up: `createCapacityGate({ limit: server.config.maxFaceSessions })`). Without it the
   * endpoint admits by count only, up to `maxSessions` (default `server.config.maxFaceSessions`,
   * else cores x 2).
   */
  readonly capacityGate?: CapacityGate;
  readonly maxSessions?: number;
  /** Re-check period for keys revoked by another process (default 10 s; see API_KEY_REVOCATION). */
  readonly revocationCheckIntervalMs?: number;
  /** Default `server.config.livekitAllowedRanges` (SVC_LIVEKIT_ALLOWED_RANGES). */
  readonly livekitAllowedRanges?: readonly string[];
  readonly publishAvatar?: AvatarPublisher;
  /** Close connections silent for this long (default 5 min; clients ping to stay open). */
  readonly idleTimeoutMs?: number;
  /** Each emitted frame's lateness against its due time, ms (`createFaceFrameTiming().realtime`). */
  readonly onFrameLateness?: (lateMs: number) => void;
}

export function mountRealtime(server: Pick<ServiceCore, 'db' | 'storage' | 'registry' | 'services' | 'logger' | 'config'>, options: MountRealtimeOptions = {}): RealtimeEndpoint {
  // Refusals and failures at warn (an operator looks for them), the rest at info.
  const log = (event: string, details: Record<string, unknown>) =>
    /_(failed|refused|unreadable|error)$/.test(event) ? server.logger.warn(details, event) : server.logger.info(details, event);
  return createRealtimeEndpoint({
    registry: server.registry,
    resolver: createRealtimeResolver({ ...server, revocationCheckIntervalMs: options.revocationCheckIntervalMs, log }),
    capacityGate: options.capacityGate,
    maxSessions: options.maxSessions ?? server.config.maxFaceSessions,
    publishAvatar: options.publishAvatar,
    livekitAllowedRanges: options.livekitAllowedRanges ?? server.config.livekitAllowedRanges,
    idleTimeoutMs: options.idleTimeoutMs,
    onFrameLateness: options.onFrameLateness,
    log,
  });
}

export * from './realtime-endpoint.ts';
export { createRealtimeResolver } from './realtime-resolver.ts';
