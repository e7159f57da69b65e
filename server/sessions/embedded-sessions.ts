/**
 * The Session API as `npm start` runs it: embedded WebRTC rooms (or the deployment's LiveKit
 * server when SVC_LIVEKIT_URL, SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET are set), the
 * in-process BotRunner with the agent's face, tool webhooks under the operator's address policy,
 * and this process's capacity gate. Tests mount sessions through this same function, so what they
 * prove is what the server runs.
 */
import { providersFromEnv, type ProviderChoice } from '../../agent/agent-pipeline.ts';
import { BotRunner, type BotRunnerOptions } from '../../agent/bot-runner.ts';
import { WebhookClient } from '../../processors/tools/index.ts';
import { LiveKitRoomProvider, type LiveKitRoomProviderOptions } from '../../transports/livekit/livekit-room-provider.ts';
import { EmbeddedRoomProvider, type RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { AppServer } from '../app.ts';
import type { MountedRooms } from '../rooms/mount.ts';
import { createSessionFaceOpener } from './agent-face.ts';
import type { BotCapacity, LiveSessions } from './live-sessions.ts';
import { mountSessions, type MountSessionsOptions } from './mount.ts';

export interface EmbeddedSessionsOptions extends Partial<Pick<MountSessionsOptions, 'lease' | 'runnerId' | 'shutdownTimeoutMs'>> {
  readonly capacity?: BotCapacity;
  /** Speech engines; default: cloud plugins when their keys are set, else the offline engines. */
  readonly providers?: ProviderChoice;
  /** Runner knobs (tests shorten timeouts). */
  readonly runner?: Partial<Pick<BotRunnerOptions, 'timeouts' | 'tuning' | 'logger'>>;
  /**
   * Sessions' rooms on a LiveKit server instead of embedded rooms. Default: from the environment
   * (`liveKitSessionSettingsFromEnv`); `null`: embedded rooms whatever the environment says.
   */
  readonly livekit?: LiveKitSessionSettings | null;
  /**
   * Called for every frame a bot's face session emits with how late it was (ms) against its due
   * time (`startedAtMs + ptsMs`): the frame jitter metric (`createFaceFrameTiming().bot`).
   */
  readonly onFrameLateness?: (lateMs: number) => void;
}

/** The deployment's LiveKit server for sessions (docs/sessions.md, "LiveKit rooms"). */
export type LiveKitSessionSettings = Pick<LiveKitRoomProviderOptions, 'url' | 'apiKey' | 'apiSecret' | 'tokenTtlMs' | 'emptyTimeoutMs' | 'maxParticipants'>;

/**
 * SVC_LIVEKIT_URL (`wss://...`), SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET: all three, or
 * none (embedded rooms). Some but not all, or a url that is not ws(s), is a configuration error
 * at startup rather than sessions failing later.
 */
export function liveKitSessionSettingsFromEnv(env: NodeJS.ProcessEnv): LiveKitSessionSettings | null {
  const url = env.SVC_LIVEKIT_URL?.trim() ?? '';
  const apiKey = env.SVC_LIVEKIT_API_KEY?.trim() ?? '';
  const apiSecret = env.SVC_LIVEKIT_API_SECRET?.trim() ?? '';
  const set = [url, apiKey, apiSecret].filter(Boolean).length;
  if (set === 0) return null;
  if (set !== 3) throw new Error('LiveKit rooms need SVC_LIVEKIT_URL, SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET together');
  if (!/^wss?:\/\/[^/]/i.test(url)) throw new Error('SVC_LIVEKIT_URL must be a ws:// or wss:// address');
  return { url, apiKey, apiSecret };
}

export interface EmbeddedSessions {
  readonly sessions: LiveSessions;
  readonly runner: BotRunner;
  close(): Promise<void>;
}

export function mountEmbeddedSessions(server: AppServer, rooms: MountedRooms, options: EmbeddedSessionsOptions = {}): EmbeddedSessions {
  const livekit = options.livekit === undefined ? liveKitSessionSettingsFromEnv(process.env) : options.livekit;
  const roomProvider: RoomProvider = livekit
    ? new LiveKitRoomProvider(livekit)
    : new EmbeddedRoomProvider(rooms.rooms, { signalUrl: `${server.baseUrl().replace(/^http/, 'ws')}/v1/rooms/signal` });
  const openFace = createSessionFaceOpener({ db: server.db, storage: server.storage, registry: server.registry, services: server.services });
  const runner = new BotRunner({
    registry: server.registry,
    providers: options.providers ?? providersFromEnv(),
    rooms: rooms.rooms,
    // The bot joins LiveKit rooms through the same address policy as any LiveKit publishing.
    livekitAllowedRanges: server.config.livekitAllowedRanges,
    openFace: async (agent, clock, limits) => {
      const face = await openFace(agent, clock, limits);
      const onFrameLateness = options.onFrameLateness;
      // Subscribers get each frame as it is emitted; the subscription ends with the session.
      if (onFrameLateness) face.frames.subscribe({ next: (f) => onFrameLateness(clock.now() - face.startedAtMs - f.ptsMs), error: () => undefined });
      return face;
    },
    webhooks: new WebhookClient({ allowedRanges: server.config.webhookAllowedRanges }),
    ...options.runner,
  });
  const sessions = mountSessions(server, {
    rooms: roomProvider,
    runner,
    ...(options.capacity ? { capacity: options.capacity } : {}),
    ...(options.lease ? { lease: options.lease } : {}),
    ...(options.runnerId ? { runnerId: options.runnerId } : {}),
    ...(options.shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.shutdownTimeoutMs } : {}),
  });
  return {
    sessions,
    runner,
    async close() {
      await sessions.close('server_shutdown');
      await runner.stopAll('server_shutdown');
    },
  };
}
