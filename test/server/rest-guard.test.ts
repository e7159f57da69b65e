/**
 * The REST guard (server/capacity/rest-guard.ts) in front of a real Koa app: a token bucket per
 * API key with the RateLimit headers and 429 `rate_limited`; visitors' and health paths are never
 * limited; the buckets are bounded; and while live sessions run, a REST flood that lags the event
 * loop is shed 503 `server_busy` until the lag falls, with nothing shed when no session runs.
 */
import test from 'ava';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Koa from 'koa';
import { createRestGuard, LOAD_WINDOW, LoadMeter, REST_LIMITS, type RestGuardOptions } from '../../server/capacity/index.ts';
import { ConfigError, restGuardFromEnv } from '../../server/config/env.ts';
import { until } from '../../testing/until.ts';

/** The guard in front of `handler` (default: answers `{ ok: true }` at once) on a real HTTP server; `before` runs ahead of the guard. */
async function serve(t: import('ava').ExecutionContext, options: Omit<RestGuardOptions, 'meter'> & { meter?: LoadMeter }, handler?: Koa.Middleware, before?: Koa.Middleware) {
  const meter = options.meter ?? new LoadMeter({ cores: 2, windowMs: 300 });
  const guard = createRestGuard({ ...options, meter });
  const app = new Koa();
  if (before) app.use(before);
  app.use(guard.middleware);
  app.use(handler ?? ((ctx) => {
    ctx.body = { ok: true };
  }));
  const server = createServer(app.callback());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
    meter.close();
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const get = async (path: string, key?: string) => {
    const res = await fetch(base + path, key ? { headers: { 'x-api-key': key } } : {});
    return { status: res.status, headers: res.headers, body: (await res.json()) as any };
  };
  return { guard, meter, get, base };
}

test('a token bucket per API key: the RateLimit headers on every answer, 429 rate_limited with Retry-After past the burst', async (t) => {
  const { guard, get } = await serve(t, { liveSessions: () => 0, rateLimit: { ratePerSecond: 1, burst: 3 }, shedding: false });
  const answers = [];
  for (let i = 0; i < 4; i++) answers.push(await get('/v1/agents', 'svc_key_a'));
  t.deepEqual(answers.map((a) => a.status), [200, 200, 200, 429]);
  t.deepEqual(answers.map((a) => a.headers.get('ratelimit-remaining')), ['2', '1', '0', '0']);
  t.true(answers.every((a) => a.headers.get('ratelimit-limit') === '3'));
  t.true(Number(answers[0]!.headers.get('ratelimit-reset')) >= 1);
  const refused = answers[3]!;
  t.is(refused.headers.get('retry-after'), '1');
  t.is(refused.headers.get('cache-control'), 'private, no-store');
  t.like(refused.body, { code: 'rate_limited', details: { retry_after_seconds: 1 } });
  t.regex(refused.body.message, /at most 1 per second \(bursts of 3\) per API key/);
  // Another key has a bucket of its own; so has a client without a key.
  t.is((await get('/v1/agents', 'svc_key_b')).status, 200);
  t.is((await get('/v1/public/model-variants')).status, 200);
  t.is(guard.stats().rateLimited, 1);
});

test('a client that goes on after its refusals is slowed: past the first ones, each refusal is held before it is sent; past the held bound, answered at once with the connection closed', async (t) => {
  const { guard, get, base } = await serve(t, { liveSessions: () => 0, rateLimit: { ratePerSecond: 0.01, burst: 1 }, shedding: false, hold: { refusalsBeforeHold: 3, holdMs: 600, maxHeldPerClient: 2 } });
  t.is((await get('/v1/agents', 'svc_key_a')).status, 200);
  for (let i = 0; i < 3; i++) t.is((await get('/v1/agents', 'svc_key_a')).status, 429);
  t.is(guard.stats().held, 0, 'the first refusals are answered at once');
  const startedAt = performance.now();
  const held = await get('/v1/agents', 'svc_key_a');
  // A lower bound only: the answer waited its hold (a loaded machine makes it longer, never shorter).
  t.true(performance.now() - startedAt >= 550, `answered after ${Math.round(performance.now() - startedAt)} ms`);
  t.is(held.status, 429);
  t.like(held.body, { code: 'rate_limited' });
  t.truthy(held.headers.get('retry-after'));
  t.is(held.headers.get('ratelimit-remaining'), '0');
  t.is(guard.stats().held, 1);
  // Three at once: two are held (the bound), the third answered at once with Connection: close.
  const answers = await Promise.all([0, 1, 2].map(async () => {
    const res = await fetch(`${base}/v1/agents`, { headers: { 'x-api-key': 'svc_key_a' } });
    await res.arrayBuffer();
    return { status: res.status, connection: res.headers.get('connection') };
  }));
  t.deepEqual(answers.map((a) => a.status), [429, 429, 429]);
  t.is(answers.filter((a) => a.connection === 'close').length, 1);
  t.is(guard.stats().held, 3);
  // Another key is not slowed by this one.
  t.is((await get('/v1/agents', 'svc_key_b')).status, 200);
});

test('while live sessions run, REST requests take turns a few at a time, in arrival order; without live sessions there is no bound', async (t) => {
  let live = 1;
  let serving = 0;
  let most = 0;
  const order: number[] = [];
  // The order the server received them in (ahead of the guard): the client's sends, 5 ms apart,
  // may reach it in another order on a loaded machine (seen in 2 of 3 runs at load 10).
  const arrived: number[] = [];
  const { base } = await serve(t, { liveSessions: () => live, rateLimit: false, shedding: false, concurrentWhileLive: 2 }, async (ctx) => {
    serving++;
    most = Math.max(most, serving);
    order.push(Number(ctx.query.n));
    // Held until the round's eight have all reached the server: how many are served at once is
    // then the guard's bound alone, not how fast a loaded machine sends them (held 40 ms each,
    // arrivals spread past it would have been served one by one).
    await until(() => arrived.length >= roundEnd, { timeoutMs: 10_000, intervalMs: 2, what: () => `the round's requests to arrive (${arrived.length} of ${roundEnd})` });
    serving--;
    ctx.body = { ok: true };
  }, async (ctx, next) => {
    arrived.push(Number(ctx.query.n));
    await next();
  });
  let roundEnd = 0;
  const round = async () => {
    roundEnd += 8;
    const statuses: number[] = [];
    const pending: Promise<void>[] = [];
    for (let n = 0; n < 8; n++) {
      pending.push(fetch(`${base}/v1/agents?n=${n}`).then(async (res) => {
        await res.arrayBuffer();
        statuses.push(res.status);
      }));
      await new Promise((resolve) => setTimeout(resolve, 5)); // arrivals in a known order
    }
    await Promise.all(pending);
    return statuses;
  };
  t.deepEqual(await round(), Array(8).fill(200));
  t.is(most, 2, 'two at a time while a session is live');
  t.is(arrived.length, 8);
  t.deepEqual(order, arrived, 'served in arrival order');
  live = 0;
  most = 0;
  t.deepEqual(await round(), Array(8).fill(200));
  t.is(most, 8, 'no bound without live sessions: all eight at once');
});

test("visitors' and health paths are never limited", async (t) => {
  const { get } = await serve(t, { liveSessions: () => 1, rateLimit: { ratePerSecond: 1, burst: 1 }, shedding: false });
  for (const path of ['/v1/public/agents/connect', '/healthz', '/readyz', '/metrics', '/widget/latest/svc-agent.js', '/']) {
    for (let i = 0; i < 3; i++) {
      const answer = await get(path, 'svc_key_a');
      t.is(answer.status, 200, path);
      t.is(answer.headers.get('ratelimit-limit'), null, path);
    }
  }
});

test('the buckets are bounded: a flood of made-up keys evicts the least recently used', async (t) => {
  const { guard, get } = await serve(t, { liveSessions: () => 0, rateLimit: { ratePerSecond: 1, burst: 2 }, shedding: false, maxBuckets: 5 });
  await get('/v1/agents', 'svc_key_a');
  await get('/v1/agents', 'svc_key_a');
  for (let i = 0; i < 20; i++) await get('/v1/agents', `svc_made_up_${i}`);
  t.is(guard.stats().buckets, 5);
  t.is((await get('/v1/agents', 'svc_key_a')).status, 200, 'its bucket was evicted: a fresh one');
});

function burn(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

test.serial('while live sessions run, a REST flood lagging the loop is shed 503 server_busy; nothing is shed without live sessions; the shedding stops once the lag falls', async (t) => {
  let live = 0;
  // Refusals are never held here: this flood waits for its answers, so held 503s would slow it
  // below the rate that sheds (the hold is the test above).
  const { guard, get } = await serve(t, { liveSessions: () => live, rateLimit: false, hold: { refusalsBeforeHold: Infinity } });
  // A flood: many requests per second (the rate condition) while the loop stalls (the lag).
  const flood = async () => {
    for (let i = 0; i < 10; i++) {
      await Promise.all(Array.from({ length: 10 }, () => get('/v1/agents', 'svc_key_a')));
      burn(30);
    }
  };
  await flood();
  t.is(guard.stats().shed, 0, 'no live session: nothing to shed for');
  t.is((await get('/v1/agents', 'svc_key_a')).status, 200);
  live = 1;
  // The same flood with a session live: within it, requests are shed.
  let shed: Awaited<ReturnType<typeof get>> | undefined;
  await until(async () => {
    await flood();
    const answer = await get('/v1/agents', 'svc_key_a');
    if (answer.status === 503) shed = answer;
    return shed;
  }, { timeoutMs: 30_000, intervalMs: 0, what: 'the flood to be shed' });
  t.is(shed!.status, 503);
  t.is(shed!.headers.get('retry-after'), String(REST_LIMITS.shedRetryAfterSeconds));
  t.like(shed!.body, { code: 'server_busy', details: { retry_after_seconds: REST_LIMITS.shedRetryAfterSeconds } });
  t.true(guard.stats().shedding);
  t.is((await get('/v1/public/agents/connect')).status, 200, 'a visitor is never shed');
  // The flood stops: within a couple of windows the lag and the rate fall, and requests are served.
  await until(async () => (await get('/v1/agents', 'svc_key_a')).status === 200, { timeoutMs: 10 * LOAD_WINDOW.windowMs, intervalMs: 100, what: 'the shedding to stop' });
  t.false(guard.stats().shedding);
});

test('settings: SVC_RATE_LIMIT (off or rate/burst) and SVC_REST_SHED_LAG_MS (off or ms); a bad value stops start-up', (t) => {
  t.deepEqual(restGuardFromEnv({}), {});
  t.deepEqual(restGuardFromEnv({ SVC_RATE_LIMIT: 'off', SVC_REST_SHED_LAG_MS: 'off' }), { rateLimit: false, shedding: false });
  t.deepEqual(restGuardFromEnv({ SVC_RATE_LIMIT: '20/40', SVC_REST_SHED_LAG_MS: '8' }), { rateLimit: { ratePerSecond: 20, burst: 40 }, shedding: { lagMs: 8 } });
  for (const bad of ['20', '0/10', '5/0', 'fast', '-1/3']) t.throws(() => restGuardFromEnv({ SVC_RATE_LIMIT: bad }), { instanceOf: ConfigError, message: /SVC_RATE_LIMIT must be/ }, bad);
  for (const bad of ['0', '-3', 'soon']) t.throws(() => restGuardFromEnv({ SVC_REST_SHED_LAG_MS: bad }), { instanceOf: ConfigError, message: /SVC_REST_SHED_LAG_MS must be/ }, bad);
});

test.serial('a client that went on past its refusals is shed while the loop lags, however few requests arrive; a client within its limits is served meanwhile', async (t) => {
  const { guard, get } = await serve(t, { liveSessions: () => 1, rateLimit: { ratePerSecond: 0.5, burst: 1 }, hold: { refusalsBeforeHold: 2, holdMs: 20 } });
  // The flooding client: refused past its bucket until its refusals are held. (Its first request
  // may itself be shed, 503, on a loaded machine: the meter's first reading of the request rate
  // covers only a few ms; a refusal either way.)
  const answers: number[] = [];
  for (let i = 0; i < 6; i++) answers.push((await get('/v1/agents', 'svc_key_flood')).status);
  t.true(answers.slice(1).every((status) => status === 429 || status === 503), `past its one token, every request refused: ${answers.join(', ')}`);
  t.true([200, 503].includes(answers[0]!), `its first: served, or shed: ${answers[0]}`);
  // The loop stalls (its lag past the bound) while a few requests a second arrive, far under
  // REST_LIMITS.shedMinRate: the flooding client, with a token again, is shed ...
  const stall = async () => {
    for (let i = 0; i < 4; i++) {
      burn(30);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };
  const shed = await until(async () => {
    await stall();
    const answer = await get('/v1/agents', 'svc_key_flood');
    return answer.status === 503 && answer;
  }, { timeoutMs: 15_000, intervalMs: 500, what: 'the flooding client shed while the loop lags' });
  t.like(shed.body, { code: 'server_busy' });
  t.is(shed.headers.get('retry-after'), String(REST_LIMITS.shedRetryAfterSeconds));
  // ... and another client, within its limits, is served under the same lag.
  await stall();
  t.is((await get('/v1/agents', 'svc_key_other')).status, 200, 'a client within its limits is not shed at this request rate');
  t.true(guard.stats().shed >= 1);
});
