/**
 * The Session API as `npm start` runs it: embedded WebRTC rooms, the in-process BotRunner with
 * the agent's face, tool webhooks under the operator's address policy, and this process's
 * capacity gate. Tests mount sessions through this same function, so what they prove is what the
 * server runs.
 */
import { providersFromEnv, type ProviderChoice } from '../../agent/agent-pipeline.ts';
import { BotRunner, type BotRunnerOptions } from '../../agent/bot-runner.ts';
import { WebhookClient } from '../../processors/tools/index.ts';
import { EmbeddedRoomProvider } from '../../transports/webrtc/room-provider.ts';
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
}

export interface EmbeddedSessions {
  readonly sessions: LiveSessions;
  readonly runner: BotRunner;
  close(): Promise<void>;
}

export function mountEmbeddedSessions(server: AppServer, rooms: MountedRooms, options: EmbeddedSessionsOptions = {}): EmbeddedSessions {
  const openFace = createSessionFaceOpener({ db: server.db, storage: server.storage, registry: server.registry, services: server.services });
  const runner = new BotRunner({
    registry: server.registry,
    providers: options.providers ?? providersFromEnv(),
    rooms: rooms.rooms,
    openFace: (agent, clock, limits) => openFace(agent, clock, limits),
    webhooks: new WebhookClient({ allowedRanges: server.config.webhookAllowedRanges }),
    ...options.runner,
  });
  const sessions = mountSessions(server, {
    rooms: new EmbeddedRoomProvider(rooms.rooms, { signalUrl: `${server.baseUrl().replace(/^http/, 'ws')}/v1/rooms/signal` }),
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
