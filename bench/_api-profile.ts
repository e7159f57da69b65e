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

const target = process.env.API_PROFILE_TARGET === 'bare' ? 'bare' : 'ours';
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
  const res = await fetch(`${url}/v1/agents`, {
    method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ title: 'agent 0', tools: [{ function: { name: 'lookup' }, delivery: { mode: 'client' } }] }),
  });
  const { agent_id: agentId } = (await res.json()) as { agent_id: string };
  await server.db.raw('analyze');
  const bare = target === 'bare' ? await startCeilingServer(dbUrl.toString(), organizationId) : undefined;
  const base = bare?.url ?? url;
  await wrk(`${base}/v1/agents/${agentId}`, key, 3);
  const session = new Session();
  session.connect();
  await post(session, 'Profiler.enable');
  await post(session, 'Profiler.setSamplingInterval', { interval: 100 });
  const load = loadavg()[0]!;
  const cpu = process.cpuUsage();
  await post(session, 'Profiler.start');
  const out = await wrk(`${base}/v1/agents/${agentId}`, key, seconds);
  const { profile } = await post<{ profile: Profiler.Profile }>(session, 'Profiler.stop');
  const used = process.cpuUsage(cpu);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  const file = process.env.API_PROFILE_OUT ?? join(tmpdir(), `api-${target}-${Date.now()}.cpuprofile`);
  writeFileSync(file, JSON.stringify(profile));
  console.log(out.trim());
  console.log(`\n${target}: ${Math.round(requests / seconds)} req/s, process CPU ${Math.round((used.user + used.system) / requests)} us/request (profiler included), loadavg_1m ${load.toFixed(2)}; profile: ${file}`);
  summarise(profile);
  session.disconnect();
  await bare?.close();
} finally {
  await server.close();
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.end();
  rmSync(dataDir, { recursive: true, force: true });
}
