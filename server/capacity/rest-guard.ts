/**
 * The REST API's guard, at the head of the Koa chain: live conversations first, and no client
 * starves the others.
 *
 * - Per-client rate limit: a token bucket per API key (requests without a key: per client
 *   address), REST_LIMITS.ratePerSecond sustained with bursts of REST_LIMITS.burst. Every guarded
 *   response says where the caller stands (`RateLimit-Limit`, `RateLimit-Remaining`,
 *   `RateLimit-Reset`, the IETF httpapi draft's fields); past it, 429 `rate_limited` with
 *   `Retry-After`. Checked before the key is looked up, so a flood costs a hash and a map lookup.
 * - Load shedding: while live sessions run and the event loop's lag p99 over the load window
 *   is past REST_LIMITS.shedLagMs with REST requests arriving at REST_LIMITS.shedMinRate or more,
 *   REST requests are answered 503 `server_busy` with `Retry-After` until the lag falls. The lag
 *   bound is below the one at which face frames leave late (LOAD_WINDOW.lateFrameMs), so the API
 *   gives way before any bot's frame is late and before the capacity gate refuses a visitor; the
 *   rate condition keeps an occasional request on a machine busy for other reasons from being shed.
 *
 * - A client that goes on after its refusals is slowed: once it has had more than
 *   REST_LIMITS.refusalsBeforeHold refusals (429 or 503) within about REST_LIMITS.holdWindowMs,
 *   each further refusal is answered only after REST_LIMITS.holdMs (its Retry-After was at least
 *   that: a client that honours it loses nothing). A load generator that never waits (wrk with
 *   20 connections was answered about 9,700 times a second, nearly all 429s, and the answers
 *   alone took the API's core from the live bots: their frames left late and visitors were
 *   refused) then gets one answer per connection per hold. Beyond REST_LIMITS.maxHeldPerClient answers held
 *   at once, a refusal is answered at once with `Connection: close`. Its accepted requests are
 *   paced evenly at its sustained rate (at most `holdMs` each), so the requests it is allowed do
 *   not come in bursts whenever tokens or a pause in the shedding let them through.
 *
 * Visitors' paths (the Session API's connect and release, the widget, the demo page) and health
 * and metrics are never limited or shed: a visitor is refused only by the agent's
 * `max_concurrency` or by the capacity gate.
 */
import { hash } from 'node:crypto';
import type Koa from 'koa';
import type { LoadMeter } from './load-meter.ts';

export const REST_LIMITS = {
  /** Requests per second one API key (or one keyless client address) may sustain. */
  ratePerSecond: 100,
  /** Requests one client may make at once before the sustained rate applies. */
  burst: 200,
  /** Buckets kept (least recently used dropped first): bounds the memory a key-rotating flood costs. */
  maxBuckets: 10_000,
  /** Shed REST requests while live sessions run and the loop's lag p99 is above this (ms). */
  shedLagMs: 5,
  /** ... and REST requests arrive at this rate or more (per second, over the load window). */
  shedMinRate: 50,
  /** `Retry-After` of a shed request (s): the lag falls within a window once the flood stops. */
  shedRetryAfterSeconds: 1,
  /** Refusals a client may have within about holdWindowMs before its further refusals are held. */
  refusalsBeforeHold: 10,
  /** How long a client's refusals are remembered (the count decays with this time constant, ms). */
  holdWindowMs: 10_000,
  /** How long a held refusal waits before it is sent (ms); no more than any Retry-After given. */
  holdMs: 1_000,
  /** Refusals held at once for one client; past it they are answered at once and the connection closed. */
  maxHeldPerClient: 256,
  /**
   * While live sessions run, REST requests served at once; the others wait their turn in arrival
   * order. Twenty at once made event-loop turns of several ms each (a socket read and a database
   * answer per request per turn), and the bots' frame timers waited behind them.
   */
  concurrentWhileLive: 4,
  /** Requests waiting for their turn; past it, 503 `server_busy` at once (answered as a shed request). */
  maxWaitingWhileLive: 512,
} as const;

/** What the configuration says of the guard (config/env.ts reads `SVC_RATE_LIMIT`, `SVC_REST_SHED_LAG_MS`). */
export interface RestGuardSettings {
  /** Per-client limits; `false` turns the rate limit off (an operator with a proxy that limits). */
  readonly rateLimit?: false | { readonly ratePerSecond: number; readonly burst: number };
  /** Shedding; `false` turns it off. */
  readonly shedding?: false | { readonly lagMs: number };
}

export interface RestGuardOptions extends RestGuardSettings {
  readonly meter: LoadMeter;
  /** Live face sessions and bots in this process (shedding protects them; none: nothing to shed for). */
  readonly liveSessions: () => number;
  /** Paths never limited nor shed (visitors, health). */
  readonly exempt?: (path: string, method: string) => boolean;
  /** Buckets kept (default REST_LIMITS.maxBuckets). */
  readonly maxBuckets?: number;
  /** REST requests served at once while live sessions run (default REST_LIMITS.concurrentWhileLive; Infinity: no bound). */
  readonly concurrentWhileLive?: number;
  /** When refusals are held (defaults from REST_LIMITS). */
  readonly hold?: { readonly refusalsBeforeHold?: number; readonly holdMs?: number; readonly maxHeldPerClient?: number };
}

export interface RestGuardStats {
  readonly rateLimited: number;
  readonly shed: number;
  /** Refusals answered after the hold (a client that went on after its refusals). */
  readonly held: number;
  /** Accepted requests of such a client that waited for their paced turn. */
  readonly paced: number;
  readonly shedding: boolean;
  /** Clients with a bucket now. */
  readonly buckets: number;
}

export interface RestGuard {
  readonly middleware: Koa.Middleware;
  stats(): RestGuardStats;
}

/** The visitors' and operators' paths: the Session API, the widget and demo page, rooms, health, metrics. */
export function isVisitorOrHealthPath(path: string): boolean {
  return (
    path === '/' ||
    path.startsWith('/v1/public/agents/connect') ||
    path.startsWith('/v1/rooms/') ||
    path.startsWith('/widget/') ||
    path === '/healthz' ||
    path === '/readyz' ||
    path === '/metrics'
  );
}

interface Bucket {
  tokens: number;
  at: number;
  /** Recent refusals, decaying with REST_LIMITS.holdWindowMs, and when it was last updated. */
  strikes: number;
  struckAt: number;
  /** Refusals of this client being held now. */
  held: number;
  /** When this client's next paced request may go on (ms, performance.now()): see the middleware. */
  pacedUntil: number;
}

export function createRestGuard(options: RestGuardOptions): RestGuard {
  const limit = options.rateLimit === false ? undefined : (options.rateLimit ?? { ratePerSecond: REST_LIMITS.ratePerSecond, burst: REST_LIMITS.burst });
  const shedLagMs = options.shedding === false ? undefined : (options.shedding?.lagMs ?? REST_LIMITS.shedLagMs);
  const exempt = options.exempt ?? isVisitorOrHealthPath;
  const buckets = new Map<string, Bucket>();
  const maxBuckets = options.maxBuckets ?? REST_LIMITS.maxBuckets;
  const counts = { rateLimited: 0, shed: 0, held: 0, paced: 0 };
  /** A client's refusals as they stand now (decaying with REST_LIMITS.holdWindowMs). */
  const struck = (bucket: Bucket, now: number) => bucket.strikes * Math.exp(-(now - bucket.struckAt) / REST_LIMITS.holdWindowMs);
  const turns = { serving: 0, waiting: [] as (() => void)[] };
  const concurrentWhileLive = options.concurrentWhileLive ?? REST_LIMITS.concurrentWhileLive;
  const hold = {
    refusalsBeforeHold: options.hold?.refusalsBeforeHold ?? REST_LIMITS.refusalsBeforeHold,
    holdMs: options.hold?.holdMs ?? REST_LIMITS.holdMs,
    maxHeldPerClient: options.hold?.maxHeldPerClient ?? REST_LIMITS.maxHeldPerClient,
  };
  /** A client's bucket and refusal record, created on its first request (the least recently seen dropped past maxBuckets). */
  const bucketOf = (client: string, now: number): Bucket => {
    let bucket = buckets.get(client);
    if (bucket) buckets.delete(client); // re-inserted below: Map order is recency
    else {
      bucket = { tokens: limit?.burst ?? 0, at: now, strikes: 0, struckAt: now, held: 0, pacedUntil: 0 };
      if (buckets.size >= maxBuckets) buckets.delete(buckets.keys().next().value!);
    }
    buckets.set(client, bucket);
    return bucket;
  };
  let lastShedding = false;

  /** Takes a token from the client's bucket: what is left, and the seconds until one is back when none was. */
  const take = (bucket: Bucket, now: number): { remaining: number; resetSeconds: number; retryAfterSeconds?: number } => {
    const { ratePerSecond, burst } = limit!;
    bucket.tokens = Math.min(burst, bucket.tokens + ((now - bucket.at) / 1000) * ratePerSecond);
    bucket.at = now;
    const refused = bucket.tokens < 1;
    if (!refused) bucket.tokens -= 1;
    const resetSeconds = Math.ceil((burst - bucket.tokens) / ratePerSecond);
    return refused ? { remaining: 0, resetSeconds, retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / ratePerSecond)) } : { remaining: Math.floor(bucket.tokens), resetSeconds };
  };

  /**
   * `flooding`: the request comes from a client that went on past its refusals (its requests are
   * paced). Its load is what threatens the frames whatever the request rate that reaches the
   * process: its refusals are held and its accepted requests paced, so a load generator with 20
   * connections arrives at 40-50 requests a second, under `shedMinRate`, and on a machine with
   * one of its two cores taken by other work its accepted reads made 11 % of the live bots'
   * frames late against 0.2 % without it (test/sessions/rest-flood.test.ts under stress-ng --cpu 1).
   */
  const shedding = (flooding: boolean): boolean => {
    if (shedLagMs === undefined || options.liveSessions() === 0) return (lastShedding = false);
    const load = options.meter.read();
    return (lastShedding = load.eventLoopLagMs > shedLagMs && (flooding || load.requestRate >= REST_LIMITS.shedMinRate));
  };

  /**
   * Answers a refusal: at once for a client's first refusals; after `holdMs` once it has gone on
   * past `refusalsBeforeHold` of them; at once with the connection closed when it already has
   * `maxHeldPerClient` answers waiting.
   */
  const refuse = async (ctx: Koa.Context, bucket: Bucket, now: number, status: number, code: string, message: string, retryAfterSeconds: number) => {
    bucket.strikes = struck(bucket, now) + 1;
    bucket.struckAt = now;
    if (bucket.strikes > hold.refusalsBeforeHold) {
      if (bucket.held >= hold.maxHeldPerClient) ctx.set('Connection', 'close');
      else {
        bucket.held++;
        counts.held++;
        try {
          await new Promise((resolve) => setTimeout(resolve, Math.min(hold.holdMs, retryAfterSeconds * 1000)));
        } finally {
          bucket.held--;
        }
      }
    }
    ctx.status = status;
    ctx.set('Retry-After', String(retryAfterSeconds));
    ctx.set('Cache-Control', 'private, no-store');
    ctx.body = { code, message, details: { retry_after_seconds: retryAfterSeconds } };
  };

  /** Who a bucket is kept for: the key's hash (a secret is never a map key), or the address without a key. */
  const clientOf = (ctx: Koa.Context, key: string) => (key ? `k:${hash('sha256', key, 'base64url')}` : `a:${ctx.ip}`);
  const shed = (ctx: Koa.Context, bucket: Bucket | undefined, now: number, key: string) => {
    counts.shed++;
    return refuse(ctx, bucket ?? bucketOf(clientOf(ctx, key), now), now, 503, 'server_busy', 'this server is serving live sessions at its limit; retry shortly', REST_LIMITS.shedRetryAfterSeconds);
  };
  // The turn is handed over in the next turn of the event loop, after its timers (a bot's next
  // frame is one): a queue of requests never runs back to back in one turn.
  const release = () => {
    const following = turns.waiting.shift();
    if (following) setImmediate(following);
    else turns.serving--;
  };
  const served = () => release();
  const failed = (err: unknown) => {
    release();
    throw err;
  };
  /** Shedding, then the request in its turn (while live sessions run, a few at a time). */
  const admit = (ctx: Koa.Context, next: Koa.Next, bucket: Bucket | undefined, now: number, key: string, flooding = false): Promise<void> => {
    if (shedding(flooding)) return shed(ctx, bucket, now, key);
    if (options.liveSessions() === 0 || turns.serving < concurrentWhileLive) turns.serving++;
    else if (turns.waiting.length >= REST_LIMITS.maxWaitingWhileLive) return shed(ctx, bucket, now, key);
    else return new Promise<void>((resolve) => turns.waiting.push(resolve)).then(() => next().then(served, failed)); // the finishing request hands its turn over
    return next().then(served, failed);
  };
  // A client that went on after its refusals has its accepted requests paced too, evenly at its
  // sustained rate, instead of in bursts whenever tokens or the shedding let them through.
  const paced = async (ctx: Koa.Context, next: Koa.Next, bucket: Bucket, now: number, key: string) => {
    const at = Math.max(now, bucket.pacedUntil);
    bucket.pacedUntil = at + 1000 / limit!.ratePerSecond;
    if (at > now) {
      counts.paced++;
      await new Promise((resolve) => setTimeout(resolve, Math.min(at - now, hold.holdMs)));
    }
    return admit(ctx, next, bucket, performance.now(), key, true);
  };

  // Not async: a request that is neither refused, paced nor waiting for its turn (every request
  // of a client within its limits while no session is live) costs no promise of its own.
  const middleware: Koa.Middleware = (ctx, next) => {
    if (ctx.method === 'OPTIONS' || exempt(ctx.path, ctx.method)) return next();
    options.meter.request();
    const now = performance.now();
    const key = ctx.get('x-api-key');
    let bucket: Bucket | undefined;
    if (limit) {
      bucket = bucketOf(clientOf(ctx, key), now);
      const taken = take(bucket, now);
      ctx.set('RateLimit-Limit', String(limit.burst));
      ctx.set('RateLimit-Remaining', String(taken.remaining));
      ctx.set('RateLimit-Reset', String(taken.resetSeconds));
      if (taken.retryAfterSeconds !== undefined) {
        counts.rateLimited++;
        return refuse(ctx, bucket, now, 429, 'rate_limited', `too many requests: at most ${limit.ratePerSecond} per second (bursts of ${limit.burst}) per API key`, taken.retryAfterSeconds);
      }
      if (struck(bucket, now) > hold.refusalsBeforeHold) return paced(ctx, next, bucket, now, key);
    }
    return admit(ctx, next, bucket, now, key);
  };

  return {
    middleware,
    stats: () => ({ ...counts, shedding: lastShedding, buckets: buckets.size }),
  };
}
