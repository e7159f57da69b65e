/**
 * What health and metrics cost (docs/operations.md): the per-request work of the metrics
 * (route label from the route table + one histogram observation), REST throughput and latency
 * without and with the operations surface (A/B/A: two servers built on one database, one with
 * the surface, run in turn), a `/metrics` scrape and a `/readyz` probe. PostgreSQL at DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
 * a database of its own, dropped at the end.
 */
import { loadavg } from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Histogram, Registry as PromRegistry } from 'prom-client';
import { Registry } from '../core/registry.ts';
import { buildServer, createServer } from '../server/build-server.ts';
import { routeLabel } from '../server/operations/metrics.ts';
import { createTestDatabase, SECRETS, testFacePlugin } from '../test/server/harness.ts';
import { percentile, printJson, printTable } from './table.ts';

const CONCURRENCY = 20;
const REQUESTS = 4000;

async function load(url: string, key: string): Promise<{ rps: number; p50: number; p99: number }> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < REQUESTS) {
        const t0 = performance.now();
        const res = await fetch(url, { headers: { 'x-api-key': key } });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`status ${res.status}`);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { rps: REQUESTS / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

export async function run(): Promise<void> {
  const db = await createTestDatabase('bench_ops');
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-ops-'));
  const config = { ...SECRETS, port: 0, host: '127.0.0.1', logLevel: 'silent', dataDir, databaseUrl: db.url };
  const server = await createServer(config, { registry: new Registry().use(testFacePlugin) });
  const withOps = await buildServer(
    { ...config, metrics: { mode: 'public' }, surfaces: { rest: true, sessions: false, rooms: false, realtime: false, widget: false, operations: true, avatarSessions: false } },
    { registry: new Registry().use(testFacePlugin), faceEngine: Promise.resolve() },
  );
  try {
    const { url } = await server.listen();
    const { url: opsUrl } = await withOps.listen();
    const { key } = await server.services.apiKeys.create('bench-ops', 'bench');
    const agent = await (await fetch(`${url}/v1/agents`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ title: 'bench' }) })).json() as { agent_id: string };
    const target = `${url}/v1/agents/${agent.agent_id}`;

    // Per request: the route label and one observation, measured alone.
    const path = `/v1/agents/${agent.agent_id}`;
    const n = 100_000;
    for (let i = 0; i < 5000; i++) routeLabel(withOps.routeOf, 'GET', path);
    let t0 = performance.now();
    for (let i = 0; i < n; i++) routeLabel(withOps.routeOf, 'GET', path);
    const labelUs = ((performance.now() - t0) * 1000) / n;
    const histogram = new Histogram({ name: 'bench_seconds', help: 'bench', labelNames: ['method', 'route', 'status'], buckets: [0.001, 0.01, 0.1, 1], registers: [new PromRegistry()] });
    t0 = performance.now();
    for (let i = 0; i < n; i++) histogram.observe({ method: 'GET', route: '/v1/agents/:agent_id', status: '200' }, 0.002);
    const observeUs = ((performance.now() - t0) * 1000) / n;

    await load(target, key); // warm-up
    const off1 = await load(target, key);
    const opsTarget = target.replace(url, opsUrl);
    await load(opsTarget, key); // warm-up
    const on = await load(opsTarget, key);
    const off2 = await load(target, key);

    const scrapes: number[] = [];
    let bytes = 0;
    for (let i = 0; i < 50; i++) {
      const s0 = performance.now();
      bytes = (await (await fetch(`${opsUrl}/metrics`)).arrayBuffer()).byteLength;
      scrapes.push(performance.now() - s0);
    }
    const probes: number[] = [];
    for (let i = 0; i < 200; i++) {
      const s0 = performance.now();
      await (await fetch(`${opsUrl}/readyz`)).arrayBuffer();
      probes.push(performance.now() - s0);
    }

    const offRps = (off1.rps + off2.rps) / 2;
    printTable([
      { what: 'route label (router.match)', 'us/request': labelUs },
      { what: 'histogram observe (3 labels)', 'us/request': observeUs },
    ]);
    printTable([
      { phase: 'without operations (A)', 'req/s': off1.rps, 'p50 ms': off1.p50, 'p99 ms': off1.p99 },
      { phase: 'with metrics (B)', 'req/s': on.rps, 'p50 ms': on.p50, 'p99 ms': on.p99 },
      { phase: 'without operations (A)', 'req/s': off2.rps, 'p50 ms': off2.p50, 'p99 ms': off2.p99 },
    ]);
    printTable([{ '/metrics p50 ms': percentile(scrapes, 50), '/metrics bytes': bytes, '/readyz p50 ms': percentile(probes, 50), '/readyz p99 ms': percentile(probes, 99) }]);
    printJson('operations', {
      loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
      route_label_us: Math.round(labelUs * 100) / 100,
      observe_us: Math.round(observeUs * 100) / 100,
      get_agent_rps_without: Math.round(offRps),
      get_agent_rps_with_metrics: Math.round(on.rps),
      get_agent_p99_ms_without: Math.round(Math.max(off1.p99, off2.p99) * 100) / 100,
      get_agent_p99_ms_with_metrics: Math.round(on.p99 * 100) / 100,
      metrics_scrape_p50_ms: Math.round(percentile(scrapes, 50) * 100) / 100,
      metrics_bytes: bytes,
      readyz_p50_ms: Math.round(percentile(probes, 50) * 100) / 100,
      concurrency: CONCURRENCY,
      requests_per_phase: REQUESTS,
    });
  } finally {
    await withOps.close();
    await server.close();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
