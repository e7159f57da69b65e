/**
 * The one typed configuration of a server process: what `buildServer` assembles from. `npm start`
 * fills it from the environment (env.ts, the only reader of process.env in server/ and agent/);
 * tests and embedders give it in code. Every field but the two secrets has a default here.
 */
import { join } from 'node:path';
import type { ProviderChoice } from '../../agent/agent-pipeline.ts';
import { AddressPolicy } from '../../processors/tools/address-policy.ts';
import { checkRtcNetwork, RTC_NETWORK_DEFAULTS, type RtcNetworkSettings } from '../../transports/webrtc/rtc-network.ts';
import type { LoadCheckOptions } from '../capacity/capacity-gate.ts';
import type { RestGuardSettings } from '../capacity/rest-guard.ts';
import { EMBEDDED_JOB_POLL_MS, resolveJobSettings, type JobSettings } from '../jobs/job-settings.ts';
import type { LiveKitRoomProviderOptions } from '../../transports/livekit/livekit-room-provider.ts';
import { ALL_IN_ONE, checkSurfaces, type Surfaces } from './surfaces.ts';

/** Object storage: the filesystem driver (embedded default) or any S3-compatible service. */
export type StorageConfig =
  | { driver: 'filesystem'; /** Root directory of stored objects; default `<dataDir>/objects`. */ root?: string }
  | {
      driver: 's3';
      bucket: string;
      region: string;
      /** Custom endpoint for S3-compatible services (MinIO, R2, ...). */
      endpoint?: string;
      forcePathStyle?: boolean;
      accessKeyId?: string;
      secretAccessKey?: string;
      /** Time limits of S3 requests (`S3_DEFAULTS`: 5 s to connect, 30 s without a byte of the answer). */
      connectTimeoutMs?: number;
      idleTimeoutMs?: number;
    };

export interface ServerConfig {
  /** TCP port; 0 picks a free one (tests). */
  port: number;
  host: string;
  /** PostgreSQL URL; when absent the embedded PGlite database in `<dataDir>/pglite` is used. */
  databaseUrl?: string;
  /** Directory for the embedded database, stored objects and generated secrets. */
  dataDir: string;
  storage: StorageConfig;
  /** Secret from which the AES-256-GCM key for provider keys is derived (sts_api_key). */
  encryptionKey: string;
  /** HMAC secret for the filesystem driver's expiring URLs. */
  signingSecret: string;
  /**
   * Private ranges (CIDRs or single addresses) that tool webhooks may reach despite the SSRF
   * policy; empty (nothing private reachable) by default. Checked when the server starts.
   */
  webhookAllowedRanges: readonly string[];
  /**
   * Private ranges a /realtime `webrtc` LiveKit url may resolve to despite the same SSRF policy
   * (`SVC_LIVEKIT_ALLOWED_RANGES`); empty by default. Separate from the webhook ranges: opening a
   * LiveKit server on the private network must not open it to tool webhooks, nor the reverse.
   */
  livekitAllowedRanges: readonly string[];
  /**
   * Non-public ranges a visitor's ICE candidates may name in embedded rooms
   * (`SVC_ICE_ALLOWED_RANGES`); empty by default: the server sends connectivity checks only to
   * public addresses a visitor names (visitors elsewhere still connect: their checks reach the
   * server, transports/webrtc/remote-candidates.ts).
   */
  iceAllowedRanges: readonly string[];
  /**
   * How the embedded rooms cross NATs (`SVC_ICE_SERVERS`, `SVC_TURN_SECRET`/`_URLS`/`_TTL_S`,
   * `SVC_RTC_ANNOUNCED_ADDRESS`, `SVC_RTC_PORT_MIN`/`_MAX`, `SVC_ICE_TRANSPORT_POLICY`;
   * docs/webrtc.md "Deploying across NAT"). Default: host candidates only, any port.
   */
  rtc: RtcNetworkSettings;
  /** External base address (`{base_url}`) used in signed URLs and the OpenAPI servers list. */
  publicBaseUrl?: string;
  /**
   * Trust `X-Forwarded-For/-Host/-Proto` (`SVC_TRUST_PROXY=1`): only when a reverse proxy in
   * front sets them. Off by default: anyone could send them.
   */
  trustProxy: boolean;
  /** Face sessions (weight units) the process admits at once (`SVC_MAX_FACE_SESSIONS`); default (cores - 0.5) / 0.25. */
  maxFaceSessions?: number;
  /** Lifetime of pre-signed upload and download URLs. */
  signedUrlTtlMs: number;
  /** Largest JSON request body accepted. */
  maxJsonBodyBytes: number;
  /** Upload sessions not finalized within this time are aborted (parts deleted). */
  uploadSessionTtlMs: number;
  /** pino level; `silent` in tests. */
  logLevel: string;
  /** A connection must deliver its request headers within this time (else 408, socket closed). */
  headersTimeoutMs: number;
  /** ... and its whole request, body included, within this time (0: no limit). */
  requestTimeoutMs: number;
  /** PostgreSQL time limits (see `DATABASE_DEFAULTS` in db/connect.ts); PGlite ignores them. */
  database: DatabaseTimeouts;
  /** Durable generation jobs: worker in this process, concurrency, attempts, leases (server/jobs/job-settings.ts). */
  jobs: JobSettings;
  /** What this process serves (surfaces.ts): all of it for `npm start`. */
  surfaces: Surfaces;
  /**
   * The capacity gate's load check (`SVC_CAPACITY_*`): false admits by count only; else the
   * bounds (default: on, with the gate's own defaults).
   */
  capacityLoadCheck: false | LoadCheckOptions;
  /** The REST guard: per-key rate limit and load shedding (`SVC_RATE_LIMIT`, `SVC_REST_SHED_LAG_MS`); default on. */
  restGuard: RestGuardSettings;
  /** The Session API's bots: where they run, in which rooms, on which engines. */
  sessions: SessionSettings;
  /** `GET /metrics` access (`SVC_METRICS`, `SVC_METRICS_TOKEN`); off by default. */
  metrics: MetricsAccess;
  /** On SIGTERM, how long live sessions get to end cleanly (`SVC_SHUTDOWN_GRACE_MS`). */
  shutdownGraceMs: number;
  /** ffmpeg of the idle-video generator (`SVC_FFMPEG_PATH`). */
  ffmpegPath: string;
}

/** Who may read `GET /metrics`: nobody (404), bearers of the token, or anyone. */
export type MetricsAccess = { readonly mode: 'off' } | { readonly mode: 'public' } | { readonly mode: 'token'; readonly token: string };

export interface BotHostSettings {
  /** The host's nice value (-20..19; above 0 lets the API's process win the cores it shares with the bots). */
  readonly nice: number;
}

/** The deployment's LiveKit server for sessions (docs/sessions.md, "LiveKit rooms"). */
export type LiveKitSessionSettings = Pick<LiveKitRoomProviderOptions, 'url' | 'apiKey' | 'apiSecret' | 'tokenTtlMs' | 'emptyTimeoutMs' | 'maxParticipants'>;

export interface SessionSettings {
  /** Bots in a child process (`SVC_BOT_HOST=process`) at this nice value; null: in this process. */
  botHost: BotHostSettings | null;
  /** Sessions' rooms on this LiveKit server (`SVC_LIVEKIT_*`); null: embedded rooms. */
  livekit: LiveKitSessionSettings | null;
  /** Speech engines: the cloud plugins whose keys are set, else the offline ones. */
  providers: ProviderChoice;
  /** Why `providers.stt` was chosen, for the start-up line (`SVC_STT_PROVIDER`, a key that is set, ...). */
  sttReason?: string;
  /**
   * `SVC_SESSIONS=fleet`: this process admits and places sessions on runners (`npm run runner`),
   * which run the bots (docs/deployment.md); null or absent: the bots run here.
   */
  fleet?: FleetApiSettings | null;
}

/** An API process of a fleet: how it talks to the runners. */
export interface FleetApiSettings {
  /** `SVC_RUNNER_SECRET`, shared with the runners. */
  readonly secret: string;
  /** `SVC_RUNNER_START_TIMEOUT_MS`: a runner that has not started the bot by then is skipped. */
  readonly startTimeoutMs?: number;
}

/** A runner process (`npm run runner`, docs/deployment.md). */
export interface RunnerSettings {
  /** `SVC_RUNNER_PUBLIC_URL`: where API processes and visitors reach this runner (`http(s)://host:port`). */
  readonly publicUrl: string;
  /** `SVC_RUNNER_SECRET`, shared with the API processes. */
  readonly secret: string;
  /** `SVC_RUNNER_SLOTS`: sessions this runner takes at once; default `SVC_MAX_FACE_SESSIONS` or its default. */
  readonly slots: number;
  /** `SVC_RUNNER_DRAIN_TIMEOUT_MS`: on SIGTERM, how long live sessions may go on (default 10 min). */
  readonly drainTimeoutMs: number;
  /** `SVC_RUNNER_ID`: its name in the registry; default host:pid:random (a new one per start). */
  readonly runnerId?: string;
}

export interface DatabaseTimeouts {
  /** `statement_timeout`: a statement running longer is cancelled (answered 503). */
  statementTimeoutMs: number;
  /** `lock_timeout`: a statement waiting longer for a lock gives up (answered 503). */
  lockTimeoutMs: number;
  /** Longest wait for a free pool connection (answered 503 beyond). */
  acquireTimeoutMs: number;
  /** Longest wait for a new connection to be established. */
  connectTimeoutMs: number;
  /**
   * A connection whose query got no byte back for `statementTimeoutMs` plus this long is stalled
   * (the database host gone without closing it, a partition): it is destroyed and the request
   * answered 503, instead of waiting for TCP to give up (about 15 minutes on Linux).
   */
  stallMarginMs: number;
}

export const SERVER_DEFAULTS = {
  /** Port of `npm start` when PORT is unset. */
  port: 8080,
  host: '0.0.0.0',
  dataDir: '.data',
  /** Signed URLs live one hour: long enough for a 10,000-part upload on a slow link. */
  signedUrlTtlMs: 60 * 60 * 1000,
  /** 1 MB: the largest legitimate body (an agent with many tools) is far below this. */
  maxJsonBodyBytes: 1024 * 1024,
  /** A day: generous for the largest upload on a slow link, short enough not to hoard disk. */
  uploadSessionTtlMs: 24 * 60 * 60 * 1000,
  /** How often abandoned uploads are swept. */
  uploadSweepIntervalMs: 60 * 60 * 1000,
  logLevel: 'info',
  webhookAllowedRanges: [] as readonly string[],
  /**
   * Headers within 20 s: ample for any real client, and a socket that connects and sends nothing
   * (or trickles its headers) is answered 408 and closed instead of being held.
   */
  headersTimeoutMs: 20_000,
  /**
   * The whole request within 15 min: a part upload (5 MiB to a few hundred MiB in practice) on a
   * slow link fits; a body trickled forever does not hold the socket.
   */
  requestTimeoutMs: 15 * 60 * 1000,
  database: {
    /** No API query legitimately runs for 15 s; a runaway one must not hold its connection. */
    statementTimeoutMs: 15_000,
    /** A request waiting 5 s for a row or table lock is better answered 503 than queued. */
    lockTimeoutMs: 5_000,
    /** 5 s for a pool connection: beyond, the database is saturated (503, Retry-After). */
    acquireTimeoutMs: 5_000,
    /** 5 s to open a connection: an unreachable host fails fast instead of hanging requests. */
    connectTimeoutMs: 5_000,
    /** 5 s past the statement timeout: the database itself cancels a slow statement and answers first. */
    stallMarginMs: 5_000,
  } satisfies DatabaseTimeouts,
  /** `Retry-After` (seconds) on 503 `service_unavailable`. */
  retryAfterSeconds: 5,
  /** Live sessions get 10 s to end cleanly on SIGTERM (`server_shutdown`: told, recorded, room closed). */
  shutdownGraceMs: 10_000,
  ffmpegPath: 'ffmpeg',
  /** Offline engines: the product runs with no cloud key. */
  providers: { stt: 'local', llm: 'local', vad: 'local' } satisfies ProviderChoice,
} as const;

/** What callers give `resolveConfig`/`buildServer`: everything optional but the secrets. */
export type ServerConfigInput = Omit<Partial<ServerConfig>, 'database' | 'jobs' | 'surfaces' | 'sessions'> &
  Pick<ServerConfig, 'encryptionKey' | 'signingSecret'> & { database?: Partial<DatabaseTimeouts>; jobs?: Partial<JobSettings>; surfaces?: Partial<Surfaces>; sessions?: Partial<SessionSettings> };

/** Fills defaults; secrets must be supplied (see `loadConfigFromEnv` for the persisted embedded ones). */
export function resolveConfig(input: ServerConfigInput): ServerConfig {
  const dataDir = input.dataDir ?? SERVER_DEFAULTS.dataDir;
  return {
    port: input.port ?? SERVER_DEFAULTS.port,
    host: input.host ?? SERVER_DEFAULTS.host,
    databaseUrl: input.databaseUrl,
    dataDir,
    storage: input.storage ?? { driver: 'filesystem', root: join(dataDir, 'objects') },
    encryptionKey: input.encryptionKey,
    signingSecret: input.signingSecret,
    webhookAllowedRanges: checkedRanges(input.webhookAllowedRanges ?? SERVER_DEFAULTS.webhookAllowedRanges),
    livekitAllowedRanges: checkedRanges(input.livekitAllowedRanges ?? []),
    iceAllowedRanges: checkedRanges(input.iceAllowedRanges ?? []),
    rtc: checkedRtc(input.rtc ?? RTC_NETWORK_DEFAULTS),
    publicBaseUrl: input.publicBaseUrl?.replace(/\/+$/, ''),
    trustProxy: input.trustProxy ?? false,
    maxFaceSessions: input.maxFaceSessions,
    signedUrlTtlMs: input.signedUrlTtlMs ?? SERVER_DEFAULTS.signedUrlTtlMs,
    maxJsonBodyBytes: input.maxJsonBodyBytes ?? SERVER_DEFAULTS.maxJsonBodyBytes,
    uploadSessionTtlMs: input.uploadSessionTtlMs ?? SERVER_DEFAULTS.uploadSessionTtlMs,
    logLevel: input.logLevel ?? SERVER_DEFAULTS.logLevel,
    headersTimeoutMs: input.headersTimeoutMs ?? SERVER_DEFAULTS.headersTimeoutMs,
    requestTimeoutMs: input.requestTimeoutMs ?? SERVER_DEFAULTS.requestTimeoutMs,
    database: { ...SERVER_DEFAULTS.database, ...input.database },
    jobs: resolveJobSettings(input.databaseUrl || input.jobs?.pollMs !== undefined ? input.jobs : { ...input.jobs, pollMs: EMBEDDED_JOB_POLL_MS }),
    surfaces: checkSurfaces({ ...ALL_IN_ONE, ...input.surfaces }),
    capacityLoadCheck: input.capacityLoadCheck ?? {},
    restGuard: input.restGuard ?? {},
    sessions: { botHost: null, livekit: null, fleet: null, providers: SERVER_DEFAULTS.providers, ...input.sessions },
    metrics: input.metrics ?? { mode: 'off' },
    shutdownGraceMs: input.shutdownGraceMs ?? SERVER_DEFAULTS.shutdownGraceMs,
    ffmpegPath: input.ffmpegPath ?? SERVER_DEFAULTS.ffmpegPath,
  };
}

function checkedRtc(rtc: RtcNetworkSettings): RtcNetworkSettings {
  checkRtcNetwork(rtc);
  return rtc;
}

/** Refuses a mistyped range at start-up rather than at the first tool call. */
function checkedRanges(ranges: readonly string[]): readonly string[] {
  new AddressPolicy(ranges);
  return [...ranges];
}
