/**
 * The environment, read once: every variable of the README's configuration table becomes a field
 * of the typed configuration (server-config.ts), checked here, so that a bad value stops start-up
 * with one line naming the setting (`ConfigError`) instead of failing later, in a request. Nothing
 * else in server/ or agent/ reads process.env; plugins keep their vendors' key variables
 * (`OPENAI_API_KEY`, ...) as their own defaults, and the face plugin reads its render thread count
 * (`SVC_FACE_RENDER_THREADS`, checked here too).
 *
 * Secrets not given in the environment are generated once and kept in `<dataDir>/secrets.json`,
 * so an embedded install keeps decrypting its stored provider keys across restarts.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ProviderChoice } from '../../agent/agent-pipeline.ts';
import type { LoadCheckOptions } from '../capacity/capacity-gate.ts';
import type { RestGuardSettings } from '../capacity/rest-guard.ts';
import { rtcNetworkFromStrings } from '../../transports/webrtc/rtc-network.ts';
import { resolveJobSettings, type JobSettings } from '../jobs/job-settings.ts';
import { defaultFaceSessionLimit } from '../capacity/capacity-gate.ts';
import { FLEET, type RunnerLoadBound } from '../fleet/fleet-store.ts';
import { HEAP_GROWTH_DEFAULTS, type HeapGrowthSetting } from '../operations/heap-growth.ts';
import { resolveConfig, SERVER_DEFAULTS, type BotHostSettings, type FleetApiSettings, type LiveKitSessionSettings, type MetricsAccess, type RunnerSettings, type ServerConfig, type StorageConfig } from './server-config.ts';

type Env = Readonly<Record<string, string | undefined>>;

/** A setting with a value the server cannot run with; the message names the variable. */
export class ConfigError extends Error {
  readonly code = 'invalid_configuration';
}

/** `SVC_BOT_HOST_NICE` unless set: the API first when both want the cores (docs/sessions.md). */
export const BOT_HOST_DEFAULT_NICE = 10;

/** A metrics token shorter than this is refused (guessable). */
export const METRICS_TOKEN_MIN_LENGTH = 16;

export const BOT_HOST_LIVEKIT_UNSUPPORTED = 'SVC_BOT_HOST=process does not run LiveKit rooms yet: leave SVC_BOT_HOST unset (inline) with SVC_LIVEKIT_URL';

/** The whole configuration of `npm start` (and `npm run worker`) from `env`. */
export function loadConfigFromEnv(env: Env = process.env): ServerConfig {
  const dataDir = env.SVC_DATA_DIR || SERVER_DEFAULTS.dataDir;
  const storage: StorageConfig =
    env.STORAGE_DRIVER === 's3'
      ? {
          driver: 's3',
          bucket: required(env, 'S3_BUCKET', 'when STORAGE_DRIVER=s3'),
          region: env.S3_REGION ?? 'us-east-1',
          endpoint: env.S3_ENDPOINT,
          forcePathStyle: env.S3_FORCE_PATH_STYLE === 'true',
          accessKeyId: env.S3_ACCESS_KEY_ID,
          secretAccessKey: env.S3_SECRET_ACCESS_KEY,
          ...(milliseconds(env, 'S3_CONNECT_TIMEOUT_MS') !== undefined ? { connectTimeoutMs: milliseconds(env, 'S3_CONNECT_TIMEOUT_MS') } : {}),
          ...(milliseconds(env, 'S3_IDLE_TIMEOUT_MS') !== undefined ? { idleTimeoutMs: milliseconds(env, 'S3_IDLE_TIMEOUT_MS') } : {}),
        }
      : { driver: 'filesystem', root: env.STORAGE_ROOT ?? join(dataDir, 'objects') };
  if (env.STORAGE_DRIVER && !['s3', 'filesystem'].includes(env.STORAGE_DRIVER)) throw new ConfigError(`STORAGE_DRIVER must be filesystem or s3, got ${JSON.stringify(env.STORAGE_DRIVER)}`);
  renderThreadsFromEnv(env);
  const persisted = env.SVC_ENCRYPTION_KEY && env.SVC_SIGNING_SECRET ? undefined : persistedSecrets(dataDir);
  const botHost = botHostFromEnv(env);
  try {
    return resolveConfig({
      port: port(env),
      host: env.HOST || SERVER_DEFAULTS.host,
      databaseUrl: env.DATABASE_URL || undefined,
      dataDir,
      storage,
      encryptionKey: env.SVC_ENCRYPTION_KEY ?? persisted!.encryptionKey,
      signingSecret: env.SVC_SIGNING_SECRET ?? persisted!.signingSecret,
      webhookAllowedRanges: list(env.SVC_WEBHOOK_ALLOWED_RANGES),
      livekitAllowedRanges: list(env.SVC_LIVEKIT_ALLOWED_RANGES),
      iceAllowedRanges: list(env.SVC_ICE_ALLOWED_RANGES),
      rtc: rtcNetworkFromStrings(env),
      publicBaseUrl: publicBaseUrl(env),
      trustProxy: ['1', 'true', 'yes'].includes((env.SVC_TRUST_PROXY ?? '').trim().toLowerCase()),
      maxFaceSessions: faceSessionLimitFromEnv(env),
      capacityLoadCheck: loadCheckFromEnv(env),
      restGuard: restGuardFromEnv(env),
      logLevel: env.LOG_LEVEL || SERVER_DEFAULTS.logLevel,
      headersTimeoutMs: milliseconds(env, 'SVC_HEADERS_TIMEOUT_MS'),
      requestTimeoutMs: milliseconds(env, 'SVC_REQUEST_TIMEOUT_MS'),
      database: {
        statementTimeoutMs: milliseconds(env, 'SVC_DB_STATEMENT_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.statementTimeoutMs,
        lockTimeoutMs: milliseconds(env, 'SVC_DB_LOCK_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.lockTimeoutMs,
        acquireTimeoutMs: milliseconds(env, 'SVC_DB_ACQUIRE_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.acquireTimeoutMs,
        connectTimeoutMs: milliseconds(env, 'SVC_DB_CONNECT_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.connectTimeoutMs,
        stallMarginMs: milliseconds(env, 'SVC_DB_STALL_MARGIN_MS') ?? SERVER_DEFAULTS.database.stallMarginMs,
      },
      jobs: jobSettingsFromEnv(env),
      sessions: { botHost, livekit: liveKitSessionSettingsFromEnv(env), fleet: fleetFromEnv(env), providers: providersFromEnv(env), sttReason: sttProviderFromEnv(env).reason },
      metrics: metricsAccessFromEnv(env),
      shutdownGraceMs: milliseconds(env, 'SVC_SHUTDOWN_GRACE_MS') ?? SERVER_DEFAULTS.shutdownGraceMs,
      ffmpegPath: env.SVC_FFMPEG_PATH || SERVER_DEFAULTS.ffmpegPath,
    });
  } catch (err) {
    // resolveConfig's own checks (address ranges): already one line naming the value.
    if (err instanceof ConfigError) throw err;
    throw new ConfigError((err as Error).message);
  }
}

function port(env: Env): number {
  const text = env.PORT?.trim();
  if (!text) return SERVER_DEFAULTS.port;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new ConfigError(`PORT must be a TCP port from 0 to 65535, got ${JSON.stringify(text)}`);
  return n;
}

function publicBaseUrl(env: Env): string | undefined {
  const text = env.PUBLIC_BASE_URL?.trim();
  if (!text) return undefined;
  if (!/^https?:\/\/[^/]/i.test(text)) throw new ConfigError(`PUBLIC_BASE_URL must be an http:// or https:// address, got ${JSON.stringify(text)}`);
  return text;
}

const list = (text: string | undefined) => (text ?? '').split(',').map((r) => r.trim()).filter(Boolean);

/** A non-negative integer number of milliseconds, or undefined when unset; anything else is refused. */
function milliseconds(env: Env, name: string): number | undefined {
  const text = env[name]?.trim();
  if (!text) return undefined;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) throw new ConfigError(`${name} must be a whole number of milliseconds, got ${JSON.stringify(text)}`);
  return value;
}

function required(env: Env, name: string, when: string): string {
  const value = env[name];
  if (!value) throw new ConfigError(`${name} is required ${when}`);
  return value;
}

function persistedSecrets(dataDir: string): { encryptionKey: string; signingSecret: string } {
  const file = join(dataDir, 'secrets.json');
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8'));
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const secrets = { encryptionKey: randomBytes(32).toString('base64'), signingSecret: randomBytes(32).toString('base64') };
  writeFileSync(file, JSON.stringify(secrets), { mode: 0o600 });
  return secrets;
}

/** `SVC_MAX_FACE_SESSIONS` (a positive integer) or undefined. */
export function faceSessionLimitFromEnv(env: Env): number | undefined {
  const raw = env.SVC_MAX_FACE_SESSIONS?.trim();
  if (!raw) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new ConfigError(`SVC_MAX_FACE_SESSIONS must be a positive integer, got ${JSON.stringify(raw)}`);
  return n;
}

/**
 * The capacity gate's late-frame check: `SVC_CAPACITY_LOAD_CHECK=off` admits by slots only
 * (false); otherwise on, with `SVC_CAPACITY_MAX_LATE_FRAME_SHARE` (above 0, at most 1; 1 never
 * refuses) as the bound when set. The retired lag bound stops start-up with a line saying why.
 */
export function loadCheckFromEnv(env: Env): false | LoadCheckOptions {
  if (env.SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS?.trim()) {
    throw new ConfigError('SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS is no longer read: the event-loop lag no longer refuses visitors; the REST API sheds its own load instead (SVC_REST_SHED_LAG_MS, docs/operations.md "Overload")');
  }
  const check = env.SVC_CAPACITY_LOAD_CHECK?.trim().toLowerCase();
  if (check === 'off') return false;
  if (check && check !== 'on') throw new ConfigError(`SVC_CAPACITY_LOAD_CHECK must be on or off, got ${JSON.stringify(env.SVC_CAPACITY_LOAD_CHECK)}`);
  const late = env.SVC_CAPACITY_MAX_LATE_FRAME_SHARE?.trim();
  if (!late) return {};
  const n = Number(late);
  if (!(n > 0 && n <= 1)) throw new ConfigError(`SVC_CAPACITY_MAX_LATE_FRAME_SHARE must be a share above 0 and at most 1, got ${JSON.stringify(late)}`);
  return { maxLateFrameShare: n };
}

/**
 * The REST guard (capacity/rest-guard.ts): `SVC_RATE_LIMIT` (`off`, or `<per second>/<burst>`,
 * default `100/200`) and `SVC_REST_SHED_LAG_MS` (`off`, or a positive number of ms, default 5).
 */
export function restGuardFromEnv(env: Env): RestGuardSettings {
  const settings: { rateLimit?: RestGuardSettings['rateLimit']; shedding?: RestGuardSettings['shedding'] } = {};
  const rate = env.SVC_RATE_LIMIT?.trim();
  if (rate?.toLowerCase() === 'off') settings.rateLimit = false;
  else if (rate) {
    const m = /^(\d+(?:\.\d+)?)\/(\d+)$/.exec(rate);
    const perSecond = Number(m?.[1]);
    const burst = Number(m?.[2]);
    if (!m || !(perSecond > 0) || !(burst >= 1)) throw new ConfigError(`SVC_RATE_LIMIT must be "off" or "<requests per second>/<burst>" (e.g. "50/100"), got ${JSON.stringify(rate)}`);
    settings.rateLimit = { ratePerSecond: perSecond, burst };
  }
  const lag = env.SVC_REST_SHED_LAG_MS?.trim();
  if (lag?.toLowerCase() === 'off') settings.shedding = false;
  else if (lag) {
    const n = Number(lag);
    if (!Number.isFinite(n) || n <= 0) throw new ConfigError(`SVC_REST_SHED_LAG_MS must be "off" or a positive number of milliseconds, got ${JSON.stringify(lag)}`);
    settings.shedding = { lagMs: n };
  }
  return settings;
}

/**
 * `SVC_METRICS`: `off`, `token` (needs `SVC_METRICS_TOKEN`, sent as `Authorization: Bearer`) or
 * `public`. Unset: `token` when `SVC_METRICS_TOKEN` is set, else `off`.
 */
export function metricsAccessFromEnv(env: Env): MetricsAccess {
  const mode = (env.SVC_METRICS ?? '').trim().toLowerCase();
  const token = (env.SVC_METRICS_TOKEN ?? '').trim();
  if (mode === '') return token ? tokenAccess(token) : { mode: 'off' };
  if (mode === 'off') return { mode: 'off' };
  if (mode === 'public') return { mode: 'public' };
  if (mode === 'token') {
    if (!token) throw new ConfigError('SVC_METRICS=token needs SVC_METRICS_TOKEN (the bearer token scrapers send)');
    return tokenAccess(token);
  }
  throw new ConfigError(`SVC_METRICS must be off, token or public, got ${JSON.stringify(env.SVC_METRICS)}`);
}

function tokenAccess(token: string): MetricsAccess {
  if (token.length < METRICS_TOKEN_MIN_LENGTH) throw new ConfigError(`SVC_METRICS_TOKEN must be at least ${METRICS_TOKEN_MIN_LENGTH} characters`);
  if (!/^[\x21-\x7e]+$/.test(token)) throw new ConfigError('SVC_METRICS_TOKEN must be printable ASCII without spaces');
  return { mode: 'token', token };
}

/** `SVC_WORKER`, `SVC_JOB_*`: only what is set; a value that is not a whole number is refused. */
export function jobSettingsFromEnv(env: Env): Partial<JobSettings> {
  const out: Partial<JobSettings> = {};
  const worker = env.SVC_WORKER?.trim().toLowerCase();
  if (worker) {
    if (['off', '0', 'false', 'no'].includes(worker)) out.runWorker = false;
    else if (['on', '1', 'true', 'yes'].includes(worker)) out.runWorker = true;
    else throw new ConfigError(`SVC_WORKER must be on or off, got ${JSON.stringify(env.SVC_WORKER)}`);
  }
  const numbers: Array<[keyof JobSettings, string]> = [
    ['concurrency', 'SVC_JOB_CONCURRENCY'],
    ['organizationConcurrency', 'SVC_JOB_ORG_CONCURRENCY'],
    ['maxQueuedPerOrganization', 'SVC_JOB_MAX_QUEUED'],
    ['maxAttempts', 'SVC_JOB_MAX_ATTEMPTS'],
    ['retryBaseMs', 'SVC_JOB_RETRY_BASE_MS'],
    ['retryMaxMs', 'SVC_JOB_RETRY_MAX_MS'],
    ['leaseMs', 'SVC_JOB_LEASE_MS'],
    ['heartbeatMs', 'SVC_JOB_HEARTBEAT_MS'],
    ['pollMs', 'SVC_JOB_POLL_MS'],
    ['attemptTimeoutMs', 'SVC_JOB_ATTEMPT_TIMEOUT_MS'],
    ['retentionMs', 'SVC_JOB_RETENTION_MS'],
  ];
  for (const [key, name] of numbers) {
    const text = env[name]?.trim();
    if (!text) continue;
    const n = Number(text);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(n)) throw new ConfigError(`${name} must be a whole number, got ${JSON.stringify(text)}`);
    (out as Record<string, number>)[key] = n;
  }
  try {
    resolveJobSettings(out); // range errors at start-up, named after the variable's setting
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
  return out;
}

/** The shortest SVC_RUNNER_SECRET accepted: a guessable one would let anyone start bots on the runners. */
export const RUNNER_SECRET_MIN_LENGTH = 16;

/** Default SVC_RUNNER_DRAIN_TIMEOUT_MS: a rolling deploy loses no call shorter than this. */
export const RUNNER_DRAIN_TIMEOUT_DEFAULT_MS = 10 * 60_000;

function runnerSecret(env: Env): string {
  const secret = env.SVC_RUNNER_SECRET ?? '';
  if (secret.length < RUNNER_SECRET_MIN_LENGTH) throw new ConfigError(`SVC_RUNNER_SECRET must be set, at least ${RUNNER_SECRET_MIN_LENGTH} characters, the same on every API process and runner`);
  return secret;
}

/**
 * SVC_SESSIONS: `inline` (default: the bots run in this process or its bot host) or `fleet` (this
 * process admits and places sessions on runners; docs/deployment.md), which needs DATABASE_URL
 * and SVC_RUNNER_SECRET; SVC_RUNNER_START_TIMEOUT_MS bounds a runner's start.
 */
export function fleetFromEnv(env: Env): FleetApiSettings | null {
  const mode = (env.SVC_SESSIONS ?? '').trim().toLowerCase();
  if (mode !== '' && mode !== 'inline' && mode !== 'fleet') throw new ConfigError(`SVC_SESSIONS must be inline or fleet, got ${JSON.stringify(env.SVC_SESSIONS)}`);
  if (mode !== 'fleet') return null;
  if (!env.DATABASE_URL) throw new ConfigError('SVC_SESSIONS=fleet needs DATABASE_URL: the API processes and the runners share one PostgreSQL');
  if ((env.SVC_BOT_HOST ?? '').trim().toLowerCase() === 'process') throw new ConfigError('SVC_SESSIONS=fleet runs the bots on runners: leave SVC_BOT_HOST unset');
  if (liveKitSessionSettingsFromEnv(env)) throw new ConfigError('SVC_SESSIONS=fleet: the runners make the rooms; set SVC_LIVEKIT_URL, SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET on the runners (npm run runner), not on the API processes');
  const startTimeoutMs = milliseconds(env, 'SVC_RUNNER_START_TIMEOUT_MS');
  if (startTimeoutMs === 0) throw new ConfigError('SVC_RUNNER_START_TIMEOUT_MS must be above 0');
  return { secret: runnerSecret(env), ...(startTimeoutMs === undefined ? {} : { startTimeoutMs }) };
}

/** `npm run runner`'s own settings (docs/deployment.md); the rest of its configuration is loadConfigFromEnv's. */
/** SVC_HEAP_GROWING_PERCENT (server/operations/heap-growth.ts): a whole percent, or `v8` for V8's own heuristic; and NODE_OPTIONS, where an operator's own flag wins. */
export function heapGrowthFromEnv(env: Env = process.env): HeapGrowthSetting {
  const raw = env.SVC_HEAP_GROWING_PERCENT?.trim();
  const nodeOptions = env.NODE_OPTIONS ?? '';
  if (!raw) return { percent: HEAP_GROWTH_DEFAULTS.percent, nodeOptions };
  if (raw === 'v8') return { percent: null, nodeOptions };
  const n = Number(raw);
  if (!Number.isInteger(n) || n < HEAP_GROWTH_DEFAULTS.minPercent || n > HEAP_GROWTH_DEFAULTS.maxPercent) {
    throw new ConfigError(`SVC_HEAP_GROWING_PERCENT must be v8 or a whole percent from ${HEAP_GROWTH_DEFAULTS.minPercent} to ${HEAP_GROWTH_DEFAULTS.maxPercent}, got ${JSON.stringify(raw)}`);
  }
  return { percent: n, nodeOptions };
}

export function runnerSettingsFromEnv(env: Env = process.env): RunnerSettings {
  const publicUrl = (env.SVC_RUNNER_PUBLIC_URL ?? '').trim().replace(/\/+$/, '');
  if (!/^https?:\/\/[^/]+$/i.test(publicUrl)) throw new ConfigError(`SVC_RUNNER_PUBLIC_URL must be this runner's http(s)://host:port as API processes and visitors reach it, got ${JSON.stringify(env.SVC_RUNNER_PUBLIC_URL ?? '')}`);
  if (!env.DATABASE_URL) throw new ConfigError('npm run runner needs DATABASE_URL: the runners and the API processes share one PostgreSQL');
  // SVC_LIVEKIT_URL with its key and secret (read with the rest of the configuration): the runner's rooms are on that LiveKit server.
  liveKitSessionSettingsFromEnv(env);
  const rawSlots = env.SVC_RUNNER_SLOTS?.trim();
  const slots = rawSlots ? Number(rawSlots) : (faceSessionLimitFromEnv(env) ?? defaultFaceSessionLimit());
  if (!Number.isInteger(slots) || slots < 1) throw new ConfigError(`SVC_RUNNER_SLOTS must be a positive integer, got ${JSON.stringify(rawSlots)}`);
  const runnerId = env.SVC_RUNNER_ID?.trim();
  if (runnerId !== undefined && !/^[A-Za-z0-9._:-]{1,128}$/.test(runnerId)) throw new ConfigError(`SVC_RUNNER_ID must be 1-128 letters, digits or . _ : -, got ${JSON.stringify(env.SVC_RUNNER_ID)}`);
  return {
    publicUrl,
    secret: runnerSecret(env),
    slots,
    drainTimeoutMs: milliseconds(env, 'SVC_RUNNER_DRAIN_TIMEOUT_MS') ?? RUNNER_DRAIN_TIMEOUT_DEFAULT_MS,
    ...(runnerId ? { runnerId } : {}),
  };
}

/**
 * A runner's load bound (docs/deployment.md): SVC_RUNNER_MAX_CPU_SHARE (its process's CPU over its
 * load window, as a share of the machine's cores, 0-1), SVC_RUNNER_MAX_LATE_FRAME_SHARE (its bots'
 * face frames more than 10 ms late, 0-1) and SVC_RUNNER_MAX_LOOP_LAG_MS (p99 event-loop lag); each
 * unset one is FLEET.loadBound's (the late-frame one: the capacity gate's, SVC_CAPACITY_*). Reported
 * in its registry row: placement skips it while over any.
 */
export function runnerLoadBoundFromEnv(env: Env = process.env): RunnerLoadBound {
  const share = (name: string, fallback: number): number => {
    const text = env[name]?.trim();
    if (!text) return fallback;
    const n = Number(text);
    if (!Number.isFinite(n) || n <= 0 || n > 1) throw new ConfigError(`${name} must be a share above 0 and at most 1, got ${JSON.stringify(text)}`);
    return n;
  };
  const lag = milliseconds(env, 'SVC_RUNNER_MAX_LOOP_LAG_MS');
  if (lag === 0) throw new ConfigError('SVC_RUNNER_MAX_LOOP_LAG_MS must be above 0');
  // Unset, the late-frame bound is the capacity gate's own (one capacity model): its
  // SVC_CAPACITY_MAX_LATE_FRAME_SHARE, or 1 (never over) with SVC_CAPACITY_LOAD_CHECK=off.
  const check = loadCheckFromEnv(env);
  const lateDefault = check === false ? 1 : (check.maxLateFrameShare ?? FLEET.loadBound.late_frame_share);
  return {
    cpu_share: share('SVC_RUNNER_MAX_CPU_SHARE', FLEET.loadBound.cpu_share),
    late_frame_share: share('SVC_RUNNER_MAX_LATE_FRAME_SHARE', lateDefault),
    event_loop_lag_ms: lag ?? FLEET.loadBound.event_loop_lag_ms,
  };
}

/**
 * SVC_RUNNER_TEST_BURN_CPU (tests and benchmarks only): the runner burns this share of one core
 * (0-1) in a thread of its own from start until it gets SIGUSR2, so that its reported load is
 * really high (test/sessions/fleet-load.test.ts). Unset: 0, nothing burned.
 */
export function runnerTestBurnFromEnv(env: Env = process.env): number {
  const text = env.SVC_RUNNER_TEST_BURN_CPU?.trim();
  if (!text) return 0;
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0 || n > 1) throw new ConfigError(`SVC_RUNNER_TEST_BURN_CPU must be a share of one core above 0 and at most 1, got ${JSON.stringify(text)}`);
  return n;
}

/**
 * SVC_LIVEKIT_URL (`wss://...`), SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET: all three, or
 * none (embedded rooms). Some but not all, or a url that is not ws(s), is refused.
 */
export function liveKitSessionSettingsFromEnv(env: Env): LiveKitSessionSettings | null {
  const url = env.SVC_LIVEKIT_URL?.trim() ?? '';
  const apiKey = env.SVC_LIVEKIT_API_KEY?.trim() ?? '';
  const apiSecret = env.SVC_LIVEKIT_API_SECRET?.trim() ?? '';
  const set = [url, apiKey, apiSecret].filter(Boolean).length;
  if (set === 0) return null;
  if (set !== 3) throw new ConfigError('LiveKit rooms need SVC_LIVEKIT_URL, SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET together');
  if (!/^wss?:\/\/[^/]/i.test(url)) throw new ConfigError('SVC_LIVEKIT_URL must be a ws:// or wss:// address');
  return { url, apiKey, apiSecret };
}

/**
 * SVC_BOT_HOST: `inline` (default) runs the bots in the server's process, `process` in a bot host
 * (a child process) with SVC_BOT_HOST_NICE (default 10).
 */
export function botHostFromEnv(env: Env): BotHostSettings | null {
  const value = (env.SVC_BOT_HOST ?? '').trim().toLowerCase();
  if (value !== 'process' && value !== 'inline' && value !== '') throw new ConfigError(`SVC_BOT_HOST must be inline or process, got ${JSON.stringify(env.SVC_BOT_HOST)}`);
  const rawNice = env.SVC_BOT_HOST_NICE?.trim();
  const nice = rawNice ? Number(rawNice) : BOT_HOST_DEFAULT_NICE;
  if (!Number.isInteger(nice) || nice < -20 || nice > 19) throw new ConfigError(`SVC_BOT_HOST_NICE must be a whole number from -20 to 19, got ${JSON.stringify(env.SVC_BOT_HOST_NICE)}`);
  if (value === 'process' && liveKitSessionSettingsFromEnv(env)) throw new ConfigError(BOT_HOST_LIVEKIT_UNSUPPORTED);
  return value === 'process' ? { nice } : null;
}

/** Cloud engines when their keys are configured (the plugins read the keys), offline engines otherwise. */
export function providersFromEnv(env: Env): ProviderChoice {
  const stt = sttProviderFromEnv(env);
  return {
    stt: stt.slug,
    llm: env.OPENAI_API_KEY || env.OPENAI_BASE_URL ? 'openai' : 'local',
    vad: 'local',
    ...(stt.model ? { options: { [`stt:${stt.slug}`]: { model: stt.model } } } : {}),
  };
}

/**
 * The deployment's speech-to-text provider, and why, with its model when `SVC_STT_MODEL` names one
 * (a provider's own model name: `base` for moonshine, `nova-3` for deepgram; the plugin checks it
 * when the server starts, server/speech-providers.ts): `SVC_STT_PROVIDER` when set (a provider slug;
 * whether its plugin is installed is checked once the plugins are loaded, server/speech-providers.ts);
 * else the first configured cloud key (Deepgram, then OpenAI); else `local`. An OpenAI key counts
 * only for OpenAI's own service or a server given in `OPENAI_STT_BASE_URL`: with `OPENAI_BASE_URL`
 * alone (a self-hosted language model) the language model's server is not assumed to transcribe.
 */
export function sttProviderFromEnv(env: Env): { readonly slug: string; readonly reason: string; readonly model?: string } {
  const chosen = sttSlugFromEnv(env);
  const model = env.SVC_STT_MODEL?.trim();
  if (!model) return chosen;
  if (!/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$/.test(model)) throw new ConfigError(`SVC_STT_MODEL must be a model name (letters, digits and . _ : / -, at most 100), got ${JSON.stringify(env.SVC_STT_MODEL)}`);
  // The phrase-list stand-in has no model: a model set for it is a mistake, not a choice to ignore.
  if (chosen.slug === 'local') throw new ConfigError(`SVC_STT_MODEL=${model} is for a speech-to-text provider that takes a model (moonshine, deepgram, openai); the deployment's is local (${chosen.reason}), which takes none`);
  return { ...chosen, model };
}

function sttSlugFromEnv(env: Env): { readonly slug: string; readonly reason: string } {
  const chosen = env.SVC_STT_PROVIDER?.trim().toLowerCase();
  if (chosen) {
    if (!/^[a-z0-9][a-z0-9_-]*$/.test(chosen)) throw new ConfigError(`SVC_STT_PROVIDER must be a provider slug (deepgram, openai, local, ...), got ${JSON.stringify(env.SVC_STT_PROVIDER)}`);
    return { slug: chosen, reason: 'SVC_STT_PROVIDER' };
  }
  if (env.DEEPGRAM_API_KEY) return { slug: 'deepgram', reason: 'DEEPGRAM_API_KEY is set' };
  const openaiKey = env.OPENAI_STT_API_KEY || env.OPENAI_API_KEY;
  if (openaiKey && (env.OPENAI_STT_BASE_URL || !env.OPENAI_BASE_URL)) return { slug: 'openai', reason: env.OPENAI_STT_BASE_URL ? 'OPENAI_STT_BASE_URL is set' : 'OPENAI_API_KEY is set' };
  return { slug: 'local', reason: 'no cloud speech-to-text key' };
}

/** `SVC_FACE_RENDER_THREADS`: checked here (0..64); the face plugin reads it as its default. */
function renderThreadsFromEnv(env: Env): void {
  const raw = env.SVC_FACE_RENDER_THREADS?.trim();
  if (!raw) return;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 64) throw new ConfigError(`SVC_FACE_RENDER_THREADS must be an integer from 0 to 64 (0 renders on the main thread), got ${JSON.stringify(raw)}`);
}

/** Where the CLI's database is, and how it is shown to the user (no password). */
export function describeDatabase(env: Env = process.env): { databaseUrl: string | undefined; pgliteDir: string; label: string } {
  const databaseUrl = env.DATABASE_URL || undefined;
  const pgliteDir = resolve(env.SVC_DATA_DIR || SERVER_DEFAULTS.dataDir, 'pglite');
  if (!databaseUrl) return { databaseUrl, pgliteDir, label: `embedded database in ${pgliteDir}` };
  let label = 'PostgreSQL (DATABASE_URL)';
  try {
    const url = new URL(databaseUrl);
    label = `PostgreSQL ${url.username ? `${decodeURIComponent(url.username)}@` : ''}${url.host}${url.pathname} (DATABASE_URL)`;
  } catch {
    // not a URL (a libpq keyword string): say only where it comes from
  }
  return { databaseUrl, pgliteDir, label };
}
