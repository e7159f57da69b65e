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
import { createSessionFaceOpener, createSessionFaceResolver } from './agent-face.ts';
import { BotHost } from './bot-host.ts';
import type { BotCapacity, LiveSessions } from './live-sessions.ts';
import { mountSessions, type MountSessionsOptions } from './mount.ts';

export interface EmbeddedSessionsOptions extends Partial<Pick<MountSessionsOptions, 'lease' | 'runnerId' | 'shutdownTimeoutMs' | 'onDecision'>> {
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
  /**
   * Run the bots in a child process of this server (server/sessions/bot-host.ts), off the event
   * loop that answers the API, with `nice` as its scheduling priority (SVC_BOT_HOST=process,
   * docs/sessions.md "Where bots run"). Default: in this process (their own plugins and runner
   * tuning apply; a host process loads the default plugins only).
   */
  readonly botHost?: BotHostSettings | null;
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
  /** The in-process runner, or the bot host (`botHost`). */
  readonly runner: BotRunner | BotHost;
  close(): Promise<void>;
}

export interface BotHostSettings {
  /** The host's nice value (-20..19; above 0 lets the API's process win the cores it shares with the bots). */
  readonly nice: number;
}

export const BOT_HOST_LIVEKIT_UNSUPPORTED = 'SVC_BOT_HOST=process does not run LiveKit rooms yet: leave SVC_BOT_HOST unset (inline) with SVC_LIVEKIT_URL';

/** `SVC_BOT_HOST_NICE` unless set: the API first when both want the cores (docs/sessions.md). */
export const BOT_HOST_DEFAULT_NICE = 10;

/**
 * SVC_BOT_HOST: `inline` (default) runs the bots in the server's process, `process` in a bot host
 * (a child process) with SVC_BOT_HOST_NICE (default 10). A bad value of either is a
 * configuration error at startup.
 */
export function botHostFromEnv(env: NodeJS.ProcessEnv): BotHostSettings | null {
  const value = (env.SVC_BOT_HOST ?? '').trim().toLowerCase();
  if (value !== 'process' && value !== 'inline' && value !== '') throw new Error(`SVC_BOT_HOST must be inline or process, got ${JSON.stringify(env.SVC_BOT_HOST)}`);
  const rawNice = env.SVC_BOT_HOST_NICE?.trim();
  const nice = rawNice ? Number(rawNice) : BOT_HOST_DEFAULT_NICE;
  if (!Number.isInteger(nice) || nice < -20 || nice > 19) throw new Error(`SVC_BOT_HOST_NICE must be a whole number from -20 to 19, got ${JSON.stringify(env.SVC_BOT_HOST_NICE)}`);
  if (value === 'process' && liveKitSessionSettingsFromEnv(env)) throw new Error(BOT_HOST_LIVEKIT_UNSUPPORTED);
  return value === 'process' ? { nice } : null;
}

export function mountEmbeddedSessions(server: AppServer, rooms: MountedRooms, options: EmbeddedSessionsOptions = {}): EmbeddedSessions {
  const livekit = options.livekit === undefined ? liveKitSessionSettingsFromEnv(process.env) : options.livekit;
  const signalUrl = `${server.baseUrl().replace(/^http/, 'ws')}/v1/rooms/signal`;
  if (options.botHost) return mountHostedSessions(server, rooms, livekit, signalUrl, options.botHost, options);
  const roomProvider: RoomProvider = livekit ? new LiveKitRoomProvider(livekit) : new EmbeddedRoomProvider(rooms.rooms, { signalUrl });
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
    // The server's logger (its LOG_LEVEL), not the tools' fallback at info.
    logger: server.logger.child({ component: 'bot' }),
    ...options.runner,
  });
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

/** The Session API with its bots in a bot host process. */
function mountHostedSessions(server: AppServer, rooms: MountedRooms, livekit: LiveKitSessionSettings | null, signalUrl: string, settings: BotHostSettings, options: EmbeddedSessionsOptions): EmbeddedSessions {
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
      providers: options.providers ?? providersFromEnv(),
      webhookAllowedRanges: server.config.webhookAllowedRanges,
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
function admissionOptions(options: EmbeddedSessionsOptions): Partial<Pick<MountSessionsOptions, 'capacity' | 'lease' | 'runnerId' | 'shutdownTimeoutMs' | 'onDecision'>> {
  return {
    ...(options.onDecision ? { onDecision: options.onDecision } : {}),
    ...(options.capacity ? { capacity: options.capacity } : {}),
    ...(options.lease ? { lease: options.lease } : {}),
    ...(options.runnerId ? { runnerId: options.runnerId } : {}),
    ...(options.shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.shutdownTimeoutMs } : {}),
  };
}
