/**
 * The fleet's settings (docs/deployment.md): SVC_SESSIONS, SVC_RUNNER_* as `npm start` and
 * `npm run runner` read them, and the refusals that stop start-up with one line naming the
 * setting. Also the runner secret's comparison (runner-protocol.ts).
 */
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, fleetFromEnv, loadConfigFromEnv, RUNNER_DRAIN_TIMEOUT_DEFAULT_MS, runnerSettingsFromEnv } from '../../server/config/env.ts';
import { bearerMatches } from '../../server/fleet/runner-protocol.ts';

const DB = 'postgres://postgres@127.0.0.1:5432/x';
const SECRET = 'sixteen-chars-or-more';

test('SVC_SESSIONS: inline by default; fleet needs DATABASE_URL and SVC_RUNNER_SECRET (16+), not with a bot host, and LiveKit settings go on the runners', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-config-fleet-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  t.is(loadConfigFromEnv({ SVC_DATA_DIR: dir }).sessions.fleet, null);
  t.is(fleetFromEnv({ SVC_SESSIONS: 'inline' }), null);
  t.deepEqual(loadConfigFromEnv({ SVC_DATA_DIR: dir, SVC_SESSIONS: 'fleet', DATABASE_URL: DB, SVC_RUNNER_SECRET: SECRET }).sessions.fleet, { secret: SECRET });
  t.deepEqual(fleetFromEnv({ SVC_SESSIONS: 'Fleet', DATABASE_URL: DB, SVC_RUNNER_SECRET: SECRET, SVC_RUNNER_START_TIMEOUT_MS: '3000' }), { secret: SECRET, startTimeoutMs: 3000 });
  const refused = (env: Record<string, string>, pattern: RegExp) => t.throws(() => fleetFromEnv(env), { instanceOf: ConfigError, message: pattern });
  refused({ SVC_SESSIONS: 'cluster' }, /SVC_SESSIONS must be inline or fleet/);
  refused({ SVC_SESSIONS: 'fleet', SVC_RUNNER_SECRET: SECRET }, /needs DATABASE_URL/);
  refused({ SVC_SESSIONS: 'fleet', DATABASE_URL: DB }, /SVC_RUNNER_SECRET must be set, at least 16/);
  refused({ SVC_SESSIONS: 'fleet', DATABASE_URL: DB, SVC_RUNNER_SECRET: 'short' }, /SVC_RUNNER_SECRET/);
  refused({ SVC_SESSIONS: 'fleet', DATABASE_URL: DB, SVC_RUNNER_SECRET: SECRET, SVC_BOT_HOST: 'process' }, /leave SVC_BOT_HOST unset/);
  refused({ SVC_SESSIONS: 'fleet', DATABASE_URL: DB, SVC_RUNNER_SECRET: SECRET, SVC_LIVEKIT_URL: 'wss://lk', SVC_LIVEKIT_API_KEY: 'k', SVC_LIVEKIT_API_SECRET: 's' }, /set SVC_LIVEKIT_URL, SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET on the runners/);
  refused({ SVC_SESSIONS: 'fleet', DATABASE_URL: DB, SVC_RUNNER_SECRET: SECRET, SVC_RUNNER_START_TIMEOUT_MS: '0' }, /above 0/);
});

test('npm run runner: SVC_RUNNER_PUBLIC_URL, secret, slots (default the face-session limit), drain timeout (default 10 min), id', (t) => {
  const base = { DATABASE_URL: DB, SVC_RUNNER_SECRET: SECRET, SVC_RUNNER_PUBLIC_URL: 'http://10.0.0.5:8090/' };
  t.like(runnerSettingsFromEnv({ ...base, SVC_MAX_FACE_SESSIONS: '3' }), { publicUrl: 'http://10.0.0.5:8090', secret: SECRET, slots: 3, drainTimeoutMs: RUNNER_DRAIN_TIMEOUT_DEFAULT_MS });
  t.is(RUNNER_DRAIN_TIMEOUT_DEFAULT_MS, 600_000);
  t.like(runnerSettingsFromEnv({ ...base, SVC_RUNNER_SLOTS: '8', SVC_RUNNER_DRAIN_TIMEOUT_MS: '30000', SVC_RUNNER_ID: 'gpu-a:1' }), { slots: 8, drainTimeoutMs: 30_000, runnerId: 'gpu-a:1' });
  const refused = (env: Record<string, string>, pattern: RegExp) => t.throws(() => runnerSettingsFromEnv(env), { instanceOf: ConfigError, message: pattern });
  refused({ ...base, SVC_RUNNER_PUBLIC_URL: '' }, /SVC_RUNNER_PUBLIC_URL must be/);
  refused({ ...base, SVC_RUNNER_PUBLIC_URL: 'http://10.0.0.5:8090/some/path' }, /SVC_RUNNER_PUBLIC_URL must be/);
  refused({ ...base, DATABASE_URL: '' }, /needs DATABASE_URL/);
  refused({ ...base, SVC_RUNNER_SECRET: '' }, /SVC_RUNNER_SECRET/);
  refused({ ...base, SVC_RUNNER_SLOTS: '0' }, /SVC_RUNNER_SLOTS must be a positive integer/);
  refused({ ...base, SVC_RUNNER_DRAIN_TIMEOUT_MS: '-1' }, /SVC_RUNNER_DRAIN_TIMEOUT_MS/);
  refused({ ...base, SVC_RUNNER_ID: 'has space' }, /SVC_RUNNER_ID/);
  // A runner may make its rooms on a LiveKit server (all three settings, as for a single process).
  t.like(runnerSettingsFromEnv({ ...base, SVC_LIVEKIT_URL: 'wss://lk.example.com', SVC_LIVEKIT_API_KEY: 'k', SVC_LIVEKIT_API_SECRET: 's' }), { slots: runnerSettingsFromEnv(base).slots });
  refused({ ...base, SVC_LIVEKIT_URL: 'wss://lk.example.com' }, /together/);
});

test('the runner secret: Bearer only, the same secret only, whatever the lengths', (t) => {
  t.is(bearerMatches(undefined, SECRET), 'missing');
  t.is(bearerMatches(SECRET, SECRET), 'missing', 'not without the Bearer scheme');
  t.is(bearerMatches(`Bearer ${SECRET}`, SECRET), 'ok');
  t.is(bearerMatches(`Bearer ${SECRET}x`, SECRET), 'wrong');
  t.is(bearerMatches('Bearer x', SECRET), 'wrong');
  t.is(bearerMatches(`Bearer ${SECRET.toUpperCase()}`, SECRET), 'wrong');
});
