/**
 * REST API benchmark on PostgreSQL: requests per second and latency percentiles at 50
 * concurrent keep-alive connections for GET agent, list agents (page of 20 out of 200) and
 * create+delete agent (one operation = POST then DELETE), each first saturated (50 requests
 * always in flight: throughput), then for reads at a fixed offered rate of 2,000 req/s over the
 * same 50 connections (latency measured from the scheduled send time). The server runs in this
 * process, logging every request at `info` (to /dev/null through pino's asynchronous
 * destination, so the cost of building and writing log lines is counted); the load generator
 * runs in a worker thread. The tables are ANALYZEd after seeding, as autovacuum would do in a
 * live database within a minute (without statistics PostgreSQL reads GET agent through the
 * organization index, every agent of the organization). `loadavg_1m` is recorded because other
 * work on the machine skews the figures. Goal (issue 6): p99 < 10 ms for reads at 2,000 req/s
 * on a 2-core machine.
 *
 * The ceiling (issue 24): the saturated GET agent against a bare `node:http` + `pg` server
 * answering the same keyed SELECT as JSON (bench/_api-ceiling.ts), same database, same load
 * generator, 50 connections, runs alternated: `get_agent_ceiling_ratio` is ours / bare (goal
 * >= 0.8; the median of the rounds' ratios, each round running every server once). Two more
 * variants price the steps in between: the bare server with our cached API-key check, and our
 * server with logging off. The profile is the servers' CPU time per request on the main thread
 * (from /proc, the load generator's thread and PostgreSQL not counted), which other work on a
 * shared machine disturbs far less than throughput: its differences are the API key, the log line,
 * and the rest (Koa, routing, validation, the response object, JSON). `API_BENCH_CEILING_ONLY=1`
 * runs the comparison alone.
 */
import { Worker } from 'node:worker_threads';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { createServer } from '../server/build-server.ts';
import { createLogDestination } from '../server/operations/log-destination.ts';
import { startCeilingServer } from './_api-ceiling.ts';
import { percentile, printJson, printTable } from './table.ts';

export const API_BENCH = {
  connections: 50,
  durationMs: 5_000,
  warmupMs: 1_000,
  listedAgents: 200,
  /** The goal's offered load for reads: latency is measured at this fixed rate too. */
  targetReadRps: 2000,
  /** A rate below this machine's capacity, to show read latency when not saturated. */
  lightReadRps: 500,
  postgresUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  /**
   * Rounds of the ceiling comparison (each: bare, ours, bare + key, ours unlogged, one after the
   * other, in reverse order every other round), after one uncounted warm-up run of each.
   */
  ceilingRounds: 6,
  /** Each ceiling run, after its warm-up: shorter than the other runs, so that the rounds alternate often. */
  ceilingDurationMs: 3_000,
} as const;

type Scenario = 'get_agent' | 'list_agents' | 'create_delete_agent';

function load(baseUrl: string, key: string, scenario: Scenario, agentId: string, ratePerSecond?: number, durationMs: number = API_BENCH.durationMs) {
  return new Promise<{ latencies: number[]; errors: number; elapsedMs: number; mainThreadCpuMs: number }>((resolve, reject) => {
    const worker = new Worker(new URL('./_api-load.mjs', import.meta.url), {
      workerData: { baseUrl, key, connections: API_BENCH.connections, warmupMs: API_BENCH.warmupMs, durationMs, scenario, agentId, ratePerSecond },
    });
    // The main thread's CPU (the servers run there) over the measured part of the run.
    let cpuAtStart = 0;
    const measuring = setTimeout(() => (cpuAtStart = mainThreadCpuMs()), API_BENCH.warmupMs);
    worker.once('message', (result) => {
      clearTimeout(measuring);
      resolve({ ...result, mainThreadCpuMs: mainThreadCpuMs() - cpuAtStart });
    });
    worker.once('error', reject);
  });
}

export async function run(): Promise<void> {
  const dbName = `svc_bench_api_${Date.now()}`;
  const admin = new pg.Client({ connectionString: API_BENCH.postgresUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const dbUrl = new URL(API_BENCH.postgresUrl);
  dbUrl.pathname = `/${dbName}`;
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-api-'));
  const server = await createServer(
    // The per-key rate limit is off (as an operator whose proxy limits would set it): one key
    // saturating the server is the load measured here, and the limit would answer most of it 429.
    { port: 0, host: '127.0.0.1', databaseUrl: dbUrl.toString(), dataDir, logLevel: 'info', encryptionKey: 'bench', signingSecret: 'bench', restGuard: { rateLimit: false } },
    { registry: new Registry(), logger: pino({ level: 'info' }, createLogDestination('/dev/null')) },
  );
  try {
    const { url } = await server.listen();
    const { key } = await server.services.apiKeys.create('bench', 'bench');
    const headers = { 'x-api-key': key, 'content-type': 'application/json' };
    let agentId = '';
    for (let i = 0; i < API_BENCH.listedAgents; i++) {
      const res = await fetch(`${url}/v1/agents`, {
        method: 'POST', headers,
        body: JSON.stringify({ title: `agent ${i}`, tools: i === 0 ? [{ function: { name: 'lookup' }, delivery: { mode: 'client' } }] : undefined }),
      });
      const body = (await res.json()) as { agent_id: string };
      if (i === 0) agentId = body.agent_id;
    }
    await server.db.raw('analyze');
    const loadBefore = loadavg()[0]!;
    const rows: Array<Record<string, string | number>> = [];
    const figures: Record<string, number | string> = {};
    Object.assign(figures, await ceiling(server, dbUrl.toString(), dataDir, url, key, agentId));
    // Writes run last: thousands of inserted-then-deleted agents leave dead tuples whose clean-up
    // (autovacuum) would otherwise land in the middle of the read figures.
    const runs: Array<{ scenario: Scenario; rate?: number }> = process.env.API_BENCH_CEILING_ONLY === '1' ? [] : [
      { scenario: 'get_agent' }, { scenario: 'list_agents' },
      { scenario: 'get_agent', rate: API_BENCH.lightReadRps }, { scenario: 'list_agents', rate: API_BENCH.lightReadRps },
      { scenario: 'get_agent', rate: API_BENCH.targetReadRps }, { scenario: 'list_agents', rate: API_BENCH.targetReadRps },
      { scenario: 'create_delete_agent' },
    ];
    for (const { scenario, rate } of runs) {
      const { latencies, errors, elapsedMs } = await load(url, key, scenario, agentId, rate);
      const rps = (latencies.length / elapsedMs) * 1000;
      const p50 = percentile(latencies, 50);
      const p99 = percentile(latencies, 99);
      const name = rate ? `${scenario}_at_${rate}` : scenario;
      rows.push({ scenario: name, load: rate ? `${rate}/s offered` : 'saturated', 'ops/s': rps, 'p50 ms': p50, 'p99 ms': p99, ops: latencies.length, errors });
      figures[`${name}_rps`] = Math.round(rps);
      figures[`${name}_p50_ms`] = Math.round(p50 * 100) / 100;
      figures[`${name}_p99_ms`] = Math.round(p99 * 100) / 100;
      figures[`${name}_errors`] = errors;
    }
    printTable(rows);
    printJson('api', {
      database: 'postgresql', connections: API_BENCH.connections, duration_ms: API_BENCH.durationMs, log_level: 'info',
      loadavg_1m: Math.round(loadBefore * 100) / 100, ...figures,
    });
  } finally {
    await server.close();
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await admin.end();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** CPU time (user + system, ms) of this process's main thread so far, from /proc (Linux). */
function mainThreadCpuMs(): number {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 of stat (utime, stime), in clock ticks of 10 ms.
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** The saturated GET agent of four servers on one database, alternated (see the header). */
async function ceiling(server: Awaited<ReturnType<typeof createServer>>, databaseUrl: string, dataDir: string, url: string, key: string, agentId: string): Promise<Record<string, number | string>> {
  const [{ organization_id: organizationId }] = (await server.db('agents').where({ agent_id: agentId }).select('organization_id')) as { organization_id: string }[];
  const quiet = await createServer(
    { port: 0, host: '127.0.0.1', databaseUrl, dataDir, logLevel: 'silent', encryptionKey: 'bench', signingSecret: 'bench', jobs: { runWorker: false }, restGuard: { rateLimit: false } },
    { registry: new Registry(), logger: pino({ level: 'silent' }) },
  );
  const bare = await startCeilingServer(databaseUrl, organizationId!);
  const bareKey = await startCeilingServer(databaseUrl, organizationId!, (k) => quiet.services.apiKeys.authenticateCached(k));
  try {
    const variants = { bare: bare.url, ours: url, bare_with_key: bareKey.url, ours_unlogged: (await quiet.listen()).url } as const;
    type Name = keyof typeof variants;
    const names = Object.keys(variants) as Name[];
    const rps = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<Name, number[]>;
    const cpuUs = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<Name, number[]>;
    // One run of each first, not counted: the first round found every server's code cold (the
    // first variant ran at a third of its rate and the first round's ratio was meaningless).
    for (const name of names) await load(variants[name], key, 'get_agent', agentId, undefined, API_BENCH.ceilingDurationMs / 3);
    const loads: number[] = [];
    for (let round = 0; round < API_BENCH.ceilingRounds; round++) {
      loads.push(loadavg()[0]!);
      for (const name of round % 2 ? [...names].reverse() : names) {
        const { latencies, errors, elapsedMs, mainThreadCpuMs: cpuMs } = await load(variants[name], key, 'get_agent', agentId, undefined, API_BENCH.ceilingDurationMs);
        if (errors) throw new Error(`${name}: ${errors} failed requests`);
        rps[name].push((latencies.length / elapsedMs) * 1000);
        cpuUs[name].push((cpuMs * 1000) / latencies.length);
      }
    }
    const median = (xs: readonly number[]) => percentile([...xs], 50);
    const rounds = rps.ours.map((r, i) => r / rps.bare[i]!);
    const us = (name: Name) => median(cpuUs[name]);
    printTable(names.map((name) => ({
      server: name,
      'req/s (rounds)': rps[name].map((r) => Math.round(r)).join(' / '),
      'median req/s': median(rps[name]),
      'main-thread CPU us/request': us(name),
    })));
    const round3 = (x: number) => Math.round(x * 1000) / 1000;
    const figures: Record<string, number | string> = {
      get_agent_ceiling_ratio: round3(median(rounds)),
      get_agent_ceiling_ratio_min: round3(Math.min(...rounds)),
      get_agent_ceiling_ratio_max: round3(Math.max(...rounds)),
      get_agent_ours_rps: Math.round(median(rps.ours)),
      get_agent_bare_rps: Math.round(median(rps.bare)),
      // CPU per request on the servers' thread: the ceiling's, and what each step adds to it.
      cpu_us_bare: Math.round(us('bare')),
      cpu_us_ours: Math.round(us('ours')),
      cpu_ratio_bare_over_ours: round3(us('bare') / us('ours')),
      profile_api_key_us: Math.round(us('bare_with_key') - us('bare')),
      profile_logging_us: Math.round(us('ours') - us('ours_unlogged')),
      profile_koa_routing_validation_json_us: Math.round(us('ours_unlogged') - us('bare_with_key')),
      ceiling_rounds: API_BENCH.ceilingRounds,
      ceiling_loadavg_1m: loads.map((l) => Math.round(l * 10) / 10).join(' / '),
    };
    printTable([{ what: 'ours / bare', 'median ratio': figures.get_agent_ceiling_ratio, 'per round': rounds.map((r) => r.toFixed(3)).join(' / '), 'CPU bare / ours': figures.cpu_ratio_bare_over_ours }]);
    return figures;
  } finally {
    await bareKey.close();
    await bare.close();
    await quiet.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await run();
