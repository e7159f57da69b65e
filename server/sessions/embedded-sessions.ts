/**
 * The Session API as `npm start` runs it: embedded WebRTC rooms (or the deployment's LiveKit
 * server when SVC_LIVEKIT_URL, SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET are set), the
 * in-process BotRunner with the agent's face, tool webhooks under the operator's address policy,
 * and this process's capacity gate. Tests mount sessions through this same function, so what they
 * prove is what the server runs.
 */
import type { ProviderChoice } from '../../agent/agent-pipeline.ts';
import { BOT_HOST_LIVEKIT_UNSUPPORTED } from '../config/env.ts';
import type { BotHostSettings, LiveKitSessionSettings } from '../config/server-config.ts';
import { BotRunner, type BotRunnerOptions } from '../../agent/bot-runner.ts';
import type { SessionRunner } from '../../agent/session-contract.ts';
import { WebhookClient } from '../../processors/tools/index.ts';
import { LiveKitRoomProvider } from '../../transports/livekit/livekit-room-provider.ts';
import { EmbeddedRoomProvider, type RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { HttpHost } from '../http/http-app.ts';
import type { ServiceCore } from '../services/open-services.ts';
import type { MountedRooms } from '../rooms/mount.ts';
import { createSessionFaceOpener, createSessionFaceResolver } from './agent-face.ts';
import { BotHost } from './bot-host.ts';
import type { BotCapacity, LiveSessions } from './live-sessions.ts';
import { mountSessions, type MountSessionsOptions } from './mount.ts';

/**
 * Who runs the bots, and in which rooms, when neither the in-process runner nor the bot host is
 * wanted (the fleet's placement on runners, a test's runner): called once at mount time.
 */
export type SessionRunnerFactory = (input: { readonly rooms: MountedRooms; readonly signalUrl: string }) => {
  readonly runner: SessionRunner;
  readonly rooms: RoomProvider;
  close(): Promise<void>;
};

export interface EmbeddedSessionsOptions extends Partial<Pick<MountSessionsOptions, 'lease' | 'runnerId' | 'shutdownTimeoutMs' | 'startTimeoutMs' | 'onDecision'>> {
  readonly capacity?: BotCapacity;
  /** Default: the in-process BotRunner, or the bot host (`botHost`). */
  readonly sessionRunner?: SessionRunnerFactory;
  /** Speech engines; default: the server's configuration (`config.sessions.providers`). */
  readonly providers?: ProviderChoice;
  /** Runner knobs (tests shorten timeouts). */
  readonly runner?: Partial<Pick<BotRunnerOptions, 'timeouts' | 'tuning' | 'logger'>>;
  /**
   * Sessions' rooms on a LiveKit server instead of embedded rooms. Default: the server's
   * configuration (`config.sessions.livekit`); `null`: embedded rooms whatever it says.
   */
  readonly livekit?: LiveKitSessionSettings | null;
  /**
   * Called for every frame a bot's face session emits with how late it was (ms) against its due
   * time (`startedAtMs + ptsMs`): the frame jitter metric (`createFaceFrameTiming().bot`).
   */
  readonly onFrameLateness?: (lateMs: number) => void;
  /**
   * Run the bots in a child process of this server (server/sessions/bot-host.ts), off the event
   * loop that answers the API, with `nice` as its scheduling priority (SVC_BOT_HOST=process,
   * docs/sessions.md "Where bots run"). Default: the server's configuration
   * (`config.sessions.botHost`); null: in this process (their own plugins and runner tuning
   * apply; a host process loads the default plugins only).
   */
  readonly botHost?: BotHostSettings | null;
}

export type { BotHostSettings, LiveKitSessionSettings } from '../config/server-config.ts';

export interface EmbeddedSessions {
  readonly sessions: LiveSessions;
  /** The in-process runner, the bot host (`botHost`), or the injected one (`sessionRunner`). */
  readonly runner: SessionRunner;
  close(): Promise<void>;
}

/** What the Session API stands on: the services below, the routes and `{base_url}` above. */
type SessionsHost = Pick<ServiceCore, 'config' | 'db' | 'storage' | 'registry' | 'services' | 'logger'> & Pick<HttpHost, 'router' | 'api' | 'baseUrl'>;

export function mountEmbeddedSessions(server: SessionsHost, rooms: MountedRooms, options: EmbeddedSessionsOptions = {}): EmbeddedSessions {
  const livekit = options.livekit === undefined ? server.config.sessions.livekit : options.livekit;
  const botHost = options.botHost === undefined ? server.config.sessions.botHost : options.botHost;
  const signalUrl = `${server.baseUrl().replace(/^http/, 'ws')}/v1/rooms/signal`;
  if (options.sessionRunner) {
    const made = options.sessionRunner({ rooms, signalUrl });
    const sessions = mountSessions(server, { rooms: made.rooms, runner: made.runner, ...admissionOptions(options) });
    return {
      sessions,
      runner: made.runner,
      async close() {
        await sessions.close('server_shutdown');
        await made.close();
      },
    };
  }
  if (botHost) return mountHostedSessions(server, rooms, livekit, signalUrl, botHost, options);
  const roomProvider: RoomProvider = livekit ? new LiveKitRoomProvider(livekit) : new EmbeddedRoomProvider(rooms.rooms, { signalUrl });
  const runner = createInlineBotRunner(server, rooms, options);
  const sessions = mountSessions(server, {
    rooms: roomProvider,
    runner,
    ...admissionOptions(options),
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

/**
 * The BotRunner of this process (inline bots): the agent's face from the database and storage,
 * tool webhooks under the operator's address policy, frames' lateness reported. The fleet's
 * runner (server/runner.ts) runs its bots with this same runner.
 */
export function createInlineBotRunner(
  server: Pick<SessionsHost, 'config' | 'db' | 'storage' | 'registry' | 'services' | 'logger'>,
  rooms: Pick<MountedRooms, 'rooms'>,
  options: Pick<EmbeddedSessionsOptions, 'providers' | 'runner' | 'onFrameLateness'> = {},
): BotRunner {
  const openFace = createSessionFaceOpener({ db: server.db, storage: server.storage, registry: server.registry, services: server.services });
  return new BotRunner({
    registry: server.registry,
    providers: options.providers ?? server.config.sessions.providers,
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
    // The server's logger (its LOG_LEVEL), not the tools' fallback at info.
    logger: server.logger.child({ component: 'bot' }),
    ...options.runner,
  });
}

/** The Session API with its bots in a bot host process. */
function mountHostedSessions(server: SessionsHost, rooms: MountedRooms, livekit: LiveKitSessionSettings | null, signalUrl: string, settings: BotHostSettings, options: EmbeddedSessionsOptions): EmbeddedSessions {
  // Not yet: the host's bot in a LiveKit room passed alone but lost its video under a loaded test
  // run (docs/sessions.md, "Where bots run"); refused rather than shipped unproven.
  if (livekit) throw new Error(BOT_HOST_LIVEKIT_UNSUPPORTED);
  const { clock, observers, worker, publish, ...tuning } = options.runner?.tuning ?? {};
  // Objects with behaviour (a clock, observers, callbacks) cannot cross to another process.
  if (clock || observers || worker || publish || options.runner?.logger) throw new Error('a bot host takes plain engine tuning only (no clock, observers, worker, publish or logger): run the bots inline for those');
  const host = new BotHost({
    init: {
      logLevel: server.logger.level,
      nice: settings.nice,
      providers: options.providers ?? server.config.sessions.providers,
      webhookAllowedRanges: server.config.webhookAllowedRanges,
      iceAllowedRanges: server.config.iceAllowedRanges,
      rtc: server.config.rtc,
      ...(options.runner?.timeouts ? { timeouts: options.runner.timeouts } : {}),
      ...(Object.keys(tuning).length ? { tuning } : {}),
    },
    signalUrl,
    resolveFace: createSessionFaceResolver({ db: server.db, storage: server.storage, registry: server.registry, services: server.services }),
    logger: server.logger,
    ...(options.onFrameLateness ? { onFrameLateness: options.onFrameLateness } : {}),
  });
  // Visitors' upgrades for the host's rooms go to it; other rooms (/realtime's) stay here.
  rooms.signalling.delegateTo(host);
  const sessions = mountSessions(server, {
    rooms: host,
    runner: host,
    ...admissionOptions(options),
  });
  return {
    sessions,
    runner: host,
    async close() {
      await sessions.close('server_shutdown');
      rooms.signalling.delegateTo(null);
      await host.close();
    },
  };
}

/** What the Session API's engine takes from these options, whoever runs the bots. */
function admissionOptions(options: EmbeddedSessionsOptions): Partial<Pick<MountSessionsOptions, 'capacity' | 'lease' | 'runnerId' | 'shutdownTimeoutMs' | 'startTimeoutMs' | 'onDecision'>> {
  return {
    ...(options.onDecision ? { onDecision: options.onDecision } : {}),
    ...(options.capacity ? { capacity: options.capacity } : {}),
    ...(options.lease ? { lease: options.lease } : {}),
    ...(options.runnerId ? { runnerId: options.runnerId } : {}),
    ...(options.shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.shutdownTimeoutMs } : {}),
    ...(options.startTimeoutMs !== undefined ? { startTimeoutMs: options.startTimeoutMs } : {}),
  };
}
