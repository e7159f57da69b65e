/**
 * Where the CPU of a saturated `GET /v1/agents/:id` goes (issue 24): the server of bench/api.ts
 * (logging every request at `info` to /dev/null, rate limit off), or the bare ceiling
 * (`API_PROFILE_TARGET=bare`), loaded by wrk (50 connections, another process) while V8's sampling
 * profiler runs in the server's process for the measured part only. Prints the top functions by
 * self time, self time by package or file, and each sample given to the innermost frame of our own
 * code (server/, core/) or else of a package: the share of each middleware with what it calls.
 * Writes the .cpuprofile (open it in Chrome's DevTools) to $API_PROFILE_OUT or a temporary file.
 *
 *   npx tsx bench/_api-profile.ts            # ours, 10 s after a 3 s warm-up
 *   API_PROFILE_TARGET=bare npx tsx bench/_api-profile.ts
 *   API_PROFILE_TARGET=both API_PROFILE_OUT=/tmp/p npx tsx bench/_api-profile.ts  # alternated, one file per run
 *
 * Needs wrk and DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), as bench/api.ts.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Session, type Profiler } from 'node:inspector';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { createServer } from '../server/build-server.ts';
import { createLogDestination } from '../server/operations/log-destination.ts';
import { startCeilingServer } from './_api-ceiling.ts';
import { API_BENCH } from './api.ts';
import { printTable } from './table.ts';

const target = process.env.API_PROFILE_TARGET === 'bare' ? 'bare' : process.env.API_PROFILE_TARGET === 'both' ? 'both' : 'ours';
const seconds = Number(process.env.API_PROFILE_SECONDS ?? 10);

function wrk(url: string, key: string, durationS: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('wrk', ['-t1', `-c${API_BENCH.connections}`, `-d${durationS}s`, '-H', `X-API-Key: ${key}`, url], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`wrk exited ${code}`))));
  });
}

const post = <T>(session: Session, method: string, params?: object) =>
  new Promise<T>((resolve, reject) => session.post(method, params ?? {}, (err, res) => (err ? reject(err) : resolve(res as T))));

/** Where a frame belongs: one of our files, a package, node's own code, or V8's pseudo-frames. */
function ownerOf(frame: Profiler.ProfileNode['callFrame'], ours: boolean): string | undefined {
  const url = frame.url;
  if (!url) return frame.functionName.startsWith('(') ? frame.functionName : ours ? undefined : '(no url: ajv validators, natives)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (pkg) return ours ? undefined : pkg[1];
  const own = /\/work\/[^/]+\/((?:server|core|bench|protocol)\/.+)$/.exec(url) ?? /\/((?:server|core|bench|protocol)\/[^/]+(?:\/[^/]+)*)$/.exec(url);
  if (own) return own[1];
  if (url.startsWith('node:')) return ours ? undefined : url;
  return ours ? undefined : url;
}

type Frame = Profiler.ProfileNode['callFrame'];

/**
 * What the servers' thread did, per request (us of self time), by layer of the stack: a native
 * function (JSON.stringify, a hash, a system call) is charged to the layer of its JavaScript caller,
 * except the socket system calls, shown apart (the kernel's loopback work, the same for any server).
 */
const LAYERS: Array<[string, (f: Frame) => boolean]> = [
  ['syscalls (writev, socket reads)', (f) => !f.url && /^(writev|writeString|writeUtf8String|writeBuffer|readStart|read)$/.test(f.functionName)],
  ['GC', (f) => f.functionName === '(garbage collector)'],
  ['promise machinery (runMicrotasks)', (f) => f.functionName === 'runMicrotasks'],
  ['Koa (context, compose, respond, delegates)', (f) => /node_modules\/(koa|koa-compose|delegates|on-finished|ee-first|mime-types|mime-db|cache-content-type|statuses|type-is|content-type|vary|encodeurl|escape-html|http-errors|cookies|only|depd)\//.test(f.url)],
  ['routing (@koa/router, route-dispatch)', (f) => /node_modules\/(@koa\/router|path-to-regexp)\/|server\/http\/route-dispatch/.test(f.url)],
  ['request log (pino, request-log)', (f) => /node_modules\/(pino|sonic-boom|quick-format-unescaped|fast-redact|atomic-sleep|on-exit-leak-free|safe-stable-stringify)\/|server\/http\/request-log/.test(f.url)],
  ['API key (authenticate, hash, cache)', (f) => /server\/http\/authenticate|server\/security\/api-key-token|server\/services\/api-keys/.test(f.url)],
  ['REST guard + load meter', (f) => /server\/capacity\//.test(f.url)],
  ['route: validation, params, JSON out (api-routes)', (f) => /server\/http\/api-routes|node_modules\/ajv/.test(f.url)],
  ['body check, headers, errors (json-body, response-headers, error-middleware)', (f) => /server\/http\/(json-body|response-headers|error-middleware|http-app)/.test(f.url)],
  ['knex pool + preparedQuery', (f) => /node_modules\/(knex|tarn)\/|server\/db\/prepared-query/.test(f.url)],
  ['pg driver (protocol, row parsing)', (f) => /node_modules\/(pg|pg-protocol|pg-types|postgres-date|pg-pool|postgres-array|postgres-interval|postgres-bytea|pg-int8)\//.test(f.url)],
  ['agent row -> JSON shape (services, row-values, handler)', (f) => /server\/(services|db\/row-values|rest\/routes)\//.test(f.url)],
  ['bare server code', (f) => /bench\/_api-ceiling/.test(f.url)],
  ['node http + streams', (f) => /^node:/.test(f.url)],
];

function layersOf(profile: Profiler.Profile, requests: number, into: Map<string, number>): void {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const deltas = profile.timeDeltas ?? [];
  (profile.samples ?? []).forEach((id, i) => {
    let node = byId.get(id)!;
    if (node.callFrame.functionName === '(idle)') return;
    let layer: string | undefined;
    for (;;) {
      const f = node.callFrame;
      layer = LAYERS.find(([, test]) => test(f))?.[0];
      if (layer || f.url || f.functionName.startsWith('(')) break;
      const up = parent.get(node.id);
      if (up === undefined) break;
      node = byId.get(up)!;
    }
    layer ??= 'other';
    into.set(layer, (into.get(layer) ?? 0) + (deltas[i + 1] ?? 0) / requests);
  });
}

function printLayers(byTarget: Record<string, Map<string, number>>): void {
  const names = Object.keys(byTarget);
  const total = (m: Map<string, number>, skipSyscalls = false) => [...m].reduce((a, [k, v]) => a + (skipSyscalls && k === LAYERS[0]![0] ? 0 : v), 0);
  printTable([
    ...[...LAYERS.map(([l]) => l), 'other'].map((layer) => ({ layer, ...Object.fromEntries(names.map((n) => [`${n} us/request`, Math.round((byTarget[n]!.get(layer) ?? 0) * 10) / 10])) })),
    { layer: 'total', ...Object.fromEntries(names.map((n) => [`${n} us/request`, Math.round(total(byTarget[n]!) * 10) / 10])) },
    { layer: 'total without socket system calls', ...Object.fromEntries(names.map((n) => [`${n} us/request`, Math.round(total(byTarget[n]!, true) * 10) / 10])) },
  ]);
}

/** Packages a sample is charged to when none of our frames is on its stack. */
const FRAMEWORKS: Record<string, string> = {
  koa: 'koa', 'koa-compose': 'koa', delegates: 'koa', 'mime-types': 'koa', 'content-type': 'koa', cookies: 'koa', 'type-is': 'koa', statuses: 'koa',
  '@koa/router': 'router', 'path-to-regexp': 'router',
  pino: 'pino', 'sonic-boom': 'pino', 'fast-redact': 'pino', 'on-exit-leak-free': 'pino',
  knex: 'knex', tarn: 'knex', pg: 'pg', 'pg-protocol': 'pg', 'pg-types': 'pg', 'postgres-date': 'pg', 'pg-pool': 'pg',
};

function summarise(profile: Profiler.Profile): void {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  const deltas = profile.timeDeltas ?? [];
  (profile.samples ?? []).forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (deltas[i + 1] ?? 0)));
  let total = 0;
  for (const [id, us] of selfUs) if (byId.get(id)!.callFrame.functionName !== '(idle)') total += us;

  const add = (m: Map<string, number>, k: string, us: number) => m.set(k, (m.get(k) ?? 0) + us);
  const fn = new Map<string, number>();
  const owner = new Map<string, number>();
  const inclusive = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const node = byId.get(id)!;
    if (node.callFrame.functionName === '(idle)') continue;
    const f = node.callFrame;
    const where = f.url ? `${f.url.replace(/^.*node_modules\//, '').replace(/^file:\/\/\/work\/[^/]+\//, '')}:${f.lineNumber + 1}` : '';
    add(fn, `${f.functionName || '(anonymous)'} ${where}`, us);
    add(owner, ownerOf(f, false)!, us);
    // Inclusive: the innermost frame of our own code or of a framework on the stack, else the
    // sample's own package (node's HTTP and streams, natives).
    let at: number | undefined = id;
    let mine: string | undefined;
    while (at !== undefined && !mine) {
      const frame = byId.get(at)!.callFrame;
      const o = ownerOf(frame, true);
      const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(frame.url)?.[1];
      if (o) mine = o;
      else if (pkg && FRAMEWORKS[pkg]) mine = `[${FRAMEWORKS[pkg]}]`;
      at = parent.get(at);
    }
    add(inclusive, mine ?? `[${ownerOf(f, false)}]`, us);
  }
  const top = (m: Map<string, number>, n: number, label: string) =>
    printTable([...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([k, us]) => ({ [label]: k, 'ms': Math.round(us / 1000), '%': Math.round((us / total) * 1000) / 10 })));
  console.log(`\nbusy samples: ${Math.round(total / 1000)} ms`);
  console.log('\n-- top functions by self time');
  top(fn, 40, 'function');
  console.log('\n-- self time by package or file');
  top(owner, 30, 'owner');
  console.log('\n-- innermost own file or framework on the stack (callees included)');
  top(inclusive, 40, 'file or framework');
}

const dbName = `svc_bench_prof_${Date.now()}`;
const admin = new pg.Client({ connectionString: API_BENCH.postgresUrl });
await admin.connect();
await admin.query(`CREATE DATABASE ${dbName}`);
const dbUrl = new URL(API_BENCH.postgresUrl);
dbUrl.pathname = `/${dbName}`;
const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-prof-'));
const server = await createServer(
  { port: 0, host: '127.0.0.1', databaseUrl: dbUrl.toString(), dataDir, logLevel: 'info', encryptionKey: 'bench', signingSecret: 'bench', restGuard: { rateLimit: false } },
  { registry: new Registry(), logger: pino({ level: 'info' }, createLogDestination('/dev/null')) },
);
try {
  const { url } = await server.listen();
  const { key, organization_id: organizationId } = await server.services.apiKeys.create('bench', 'bench');
  // Seeded as bench/api.ts does, through the API: the server has served POSTs before the GETs
  // (its code has seen more than one kind of request, as a live server's has).
  let agentId = '';
  for (let i = 0; i < API_BENCH.listedAgents; i++) {
    const res = await fetch(`${url}/v1/agents`, {
      method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ title: `agent ${i}`, tools: i === 0 ? [{ function: { name: 'lookup' }, delivery: { mode: 'client' } }] : undefined }),
    });
    const body = (await res.json()) as { agent_id: string };
    if (i === 0) agentId = body.agent_id;
  }
  await server.db.raw('analyze');
  const bare = await startCeilingServer(dbUrl.toString(), organizationId);
  const urls = { ours: url, bare: bare.url } as const;
  const targets = target === 'both' ? (['ours', 'bare'] as const) : ([target] as const);
  for (const t of targets) await wrk(`${urls[t]}/v1/agents/${agentId}`, key, 3);
  const session = new Session();
  session.connect();
  await post(session, 'Profiler.enable');
  await post(session, 'Profiler.setSamplingInterval', { interval: 100 });
  const base = process.env.API_PROFILE_OUT ?? join(tmpdir(), `api-${target}-${Date.now()}`);
  // `both`: the servers profiled in turn, round after round (the machine's load changes within a
  // minute), each round's profile written on its own: `<out>-<server>-<round>.cpuprofile`.
  const rounds = target === 'both' ? Number(process.env.API_PROFILE_ROUNDS ?? 4) : 1;
  const perRound = target === 'both' ? Math.max(2, Math.round(seconds / rounds)) : seconds;
  const totals = { ours: { requests: 0, cpuUs: 0 }, bare: { requests: 0, cpuUs: 0 } };
  const loads: number[] = [];
  const layers = { ours: new Map<string, number>(), bare: new Map<string, number>() };
  for (let round = 0; round < rounds; round++) {
    loads.push(loadavg()[0]!);
    for (const t of round % 2 ? [...targets].reverse() : targets) {
      const cpu = process.cpuUsage();
      await post(session, 'Profiler.start');
      const out = await wrk(`${urls[t]}/v1/agents/${agentId}`, key, perRound);
      const { profile } = await post<{ profile: Profiler.Profile }>(session, 'Profiler.stop');
      const used = process.cpuUsage(cpu);
      const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
      totals[t].requests += requests;
      totals[t].cpuUs += used.user + used.system;
      const file = target === 'both' ? `${base}-${t}-${round}.cpuprofile` : base.endsWith('.cpuprofile') ? base : `${base}.cpuprofile`;
      writeFileSync(file, JSON.stringify(profile));
      console.log(`${t} round ${round}: ${Math.round(requests / perRound)} req/s, process CPU ${Math.round((used.user + used.system) / requests)} us/request (profiler included), loadavg_1m ${loads.at(-1)!.toFixed(2)}; profile: ${file} (${requests} requests)`);
      layersOf(profile, 1, layers[t]);
      if (target !== 'both') summarise(profile);
    }
  }
  const perRequest = (t: 'ours' | 'bare') => new Map([...layers[t]].map(([k, us]) => [k, us / totals[t].requests]));
  if (target !== 'both') printLayers({ [target]: perRequest(target) });
  if (target === 'both') {
    const { ours, bare: b } = totals;
    console.log('\n-- by layer, the rounds together');
    printLayers({ ours: perRequest('ours'), bare: perRequest('bare') });
    console.log(`\nours / bare: ${(ours.requests / b.requests).toFixed(3)} by requests, CPU per request bare / ours ${((b.cpuUs / b.requests) / (ours.cpuUs / ours.requests)).toFixed(3)}; loadavg_1m ${loads.map((l) => l.toFixed(1)).join(' / ')}`);
  }
  session.disconnect();
  await bare.close();
} finally {
  await server.close();
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.end();
  rmSync(dataDir, { recursive: true, force: true });
}
