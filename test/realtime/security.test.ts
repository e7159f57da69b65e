/**
 * /realtime security on the real server (PostgreSQL, API keys, the real face plugin), issue 17:
 * - a key in the URL is refused under any parameter name, recognised by the key format (item 9);
 * - revoking a key ends its live sessions: at once through this process, within the re-check
 *   period when another process (another `ApiKeys` over the same database, as the CLI) revokes
 *   it (item 4);
 * - admission goes through the process-wide capacity gate the Session API shares: a lease held
 *   elsewhere (a bot) takes a session's place, `server_busy` while full, admitted again after the
 *   lease is released (item 6).
 */
import test from 'ava';
import { holdsWithin } from '../../testing/until.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { createCapacityGate } from '../../server/capacity/index.ts';
import { attachRealtime, createRealtimeResolver, type RealtimeEndpoint } from '../../server/realtime/index.ts';
import { ApiKeys } from '../../server/services/api-keys.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { connectRaw, isError, isReady, type Conn } from './ws-conn.ts';

let ts: TestServer;
let endpoint: RealtimeEndpoint;
// Slots only: these tests count leases exactly (3 of 3); a loaded machine's late frames must not add
// refusals to that count. The late-frame rule has its own test below, with a gate of its own.
const gate = createCapacityGate({ limit: 3, loadCheck: false });
const CONFIG = 'config_id=svc/human-portrait';

test.before(async () => {
  // A short re-check period: the bound under test, not a timing goal.
  ts = await startTestServer({ label: 'realtime_security', plugins: [facePlugin], surfaces: { realtime: true }, parts: { capacity: gate, realtime: { revocationCheckIntervalMs: 200 } } });
  endpoint = ts.server.realtime!;
});

test.after.always(async () => {
  await ts?.stop();
  gate.close();
});

const open = (query: string, key: string): Conn => connectRaw(`${ts.url.replace(/^http/, 'ws')}/realtime?${query}`, { 'x-api-key': key });

function opened(t: { teardown(fn: () => void): void }, query: string, key: string): Conn {
  const c = open(query, key);
  t.teardown(() => c.ws.close());
  return c;
}

test.serial('a key in the URL is refused whatever the parameter is called (by the key format), other parameters pass', async (t) => {
  const names = ['API_KEY', 'access_token', 'auth', 'Authorization', 'X-Api-Key', 'k', 'q', 'session', 'svc'];
  for (const name of names) {
    const c = opened(t, `${CONFIG}&${encodeURIComponent(name)}=${encodeURIComponent(ts.keyA)}`, ts.keyA);
    t.like(await c.next(isError('auth_failed')), { fatal: true }, name);
    t.is((await c.closed).code, 4401, name);
  }
  // Inside a value (a bearer string, a list), and as a parameter name.
  for (const query of [`${CONFIG}&x=${encodeURIComponent(`Bearer ${ts.keyA}`)}`, `${CONFIG}&x=a,${ts.keyA}`, `${CONFIG}&${ts.keyA}`]) {
    const c = opened(t, query, ts.keyA);
    await c.next(isError('auth_failed'));
    t.is((await c.closed).code, 4401, query);
  }
  // Harmless extra parameters do not trip it.
  const fine = opened(t, `${CONFIG}&client=svc_client&trace=abc`, ts.keyA);
  await fine.next(isReady);
  t.pass();
});

test.serial('revoking the key through this process ends its live session at once with auth_failed (4401)', async (t) => {
  const key = await ts.server.services.apiKeys.create('org-revoke', 'live');
  const c = opened(t, CONFIG, key.key);
  await c.next(isReady);
  const bystander = opened(t, CONFIG, ts.keyA);
  await bystander.next(isReady);
  t.true(await ts.server.services.apiKeys.revoke(key.api_key_id));
  const error = await c.next(isError('auth_failed'));
  t.like(error, { fatal: true });
  t.regex(error.type === 'error' ? error.message : '', /revoked/);
  t.is((await c.closed).code, 4401);
  t.is(bystander.ws.readyState, bystander.ws.OPEN, 'a session of another key carries on');
  // A new session with the revoked key is refused too.
  const again = opened(t, CONFIG, key.key);
  await again.next(isError('auth_failed'));
});

test.serial('a revocation by another process (another ApiKeys over the same database, as the CLI) ends the session within the re-check period', async (t) => {
  const key = await ts.server.services.apiKeys.create('org-revoke-cli', 'live');
  const c = opened(t, CONFIG, key.key);
  await c.next(isReady);
  const elsewhere = new ApiKeys(ts.server.db); // no in-process event reaches the server's instance
  t.true(await elsewhere.revoke(key.api_key_id));
  await c.next(isError('auth_failed'), 15_000); // bound for a loaded machine: the period is 200 ms
  t.is((await c.closed).code, 4401);
});

/** Polls until the gate holds `inUse` (a bound for a loaded machine, not a timing goal). */
async function gateHolds(inUse: number): Promise<void> {
  await holdsWithin(() => gate.snapshot().inUse === inUse, { timeoutMs: 10_000, intervalMs: 25 });
}

test.serial('sessions take their place in the shared capacity gate: a lease held by someone else (a bot) leaves room for fewer, server_busy when full', async (t) => {
  await gateHolds(0); // the earlier tests' sessions are gone
  t.is(gate.snapshot().inUse, 0);
  const botLease = gate.tryAcquire(2);
  t.truthy(botLease, 'the bot got its share');
  t.teardown(() => botLease?.release());
  const first = opened(t, CONFIG, ts.keyA);
  await first.next(isReady);
  t.is(gate.snapshot().inUse, 3);
  const second = opened(t, CONFIG, ts.keyA);
  const busy = await second.next(isError('server_busy'));
  t.regex(busy.type === 'error' ? busy.message : '', /at most 3/);
  t.is((await second.closed).code, 4503);
  botLease!.release();
  botLease!.release(); // idempotent: frees 2, not 4
  t.is(gate.snapshot().inUse, 1);
  const third = opened(t, CONFIG, ts.keyA);
  await third.next(isReady);
  first.ws.close();
  await first.closed;
  // The server released the closed session's lease.
  await gateHolds(1);
  t.is(gate.snapshot().inUse, 1);
});

test.serial("while the live sessions' frames are late /realtime refuses new sessions with server_busy, below the count limit", async (t) => {
  const loaded = createCapacityGate({ limit: 50 });
  const overloadEndpoint = attachRealtime(ts.server.httpServer, { registry: ts.server.registry, resolver: createRealtimeResolver(ts.server), capacityGate: loaded, path: '/realtime-loaded' });
  t.teardown(async () => {
    await overloadEndpoint.close();
    loaded.close();
  });
  const url = `${ts.url.replace(/^http/, 'ws')}/realtime-loaded?${CONFIG}`;
  const first = connectRaw(url, { 'x-api-key': ts.keyA });
  t.teardown(() => first.ws.close());
  await first.next(isReady);
  // The running session's frames leave late, as on a saturated machine (1 in 5 over the 10 ms bound).
  for (let i = 0; i < 100; i++) loaded.recordFrameLateness(i % 5 === 0 ? 50 : 1);
  const second = connectRaw(url, { 'x-api-key': ts.keyA });
  t.teardown(() => second.ws.close());
  const busy = await second.next(isError('server_busy'));
  t.regex(busy.type === 'error' ? busy.message : '', /running late/);
  t.is((await second.closed).code, 4503);
  t.like(loaded.snapshot(), { inUse: 1, refused: { late_frames: 1 } });
});
