/**
 * A burst of visitors against one agent (issue 25): a real server process on PostgreSQL, 50
 * connects at once against `max_concurrency` 10, three rounds (the admitted sessions released
 * between them). Reports what was admitted and refused by reason (no 5xx is the goal), the
 * server's own time to decide (`svc_session_admission_decision_seconds`, request to admitted or
 * refused: its histogram bucket holding the p50 / p99), and the refused visitors' answer times as
 * their client sees them. Goal: decision p99 < 50 ms on PostgreSQL. The burst starts once the server
 * says it is ready (`/readyz`), as a load balancer would send it.
 *
 * The visitors: 50 new TCP connections, each writing one ready-made request, as 50 browsers on other
 * machines look to the server. The load generator shares the server's two cores, so it must cost
 * next to nothing: with `fetch` (undici) the client's own set-up of 50 connections took most of a
 * core for ~100 ms and the requests reached the server spread over 100-120 ms, which no remote
 * visitor causes (docs/operations.md). `SESSIONS_BURST_CLIENT=fetch` runs that client instead.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase } from '../test/server/harness.ts';
import { startServerProcess } from '../test/sessions/server-process.ts';
import { percentile, printJson, printTable } from './table.ts';
import { until } from '../testing/until.ts';

const BURST = 50;
const LIMIT = 10;
const ROUNDS = 3;

const CLIENT = process.env.SESSIONS_BURST_CLIENT === 'fetch' ? 'fetch' : 'tcp';

interface ConnectAnswer {
  readonly status: number;
  readonly code: string | undefined;
  readonly room: string | null;
  readonly ms: number;
}

/** One visitor's connect on a new TCP connection of its own: one ready-made request, the answer read to its end. */
function connectOverTcp(serverUrl: string, body: string): Promise<ConnectAnswer> {
  const url = new URL(serverUrl);
  const request = Buffer.from(
    `POST /v1/public/agents/connect HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const socket = tcpConnect(Number(url.port), url.hostname, () => socket.write(request));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      let answer: any = {};
      try {
        answer = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
      } catch {
        // (a status without a JSON body is counted by its status)
      }
      resolve({ status, code: answer.error_code, room: status === 200 ? new URL(answer.room_url).searchParams.get('room') : null, ms: performance.now() - started });
    });
  });
}

async function connectOverFetch(serverUrl: string, body: string): Promise<ConnectAnswer> {
  const started = performance.now();
  const res = await fetch(`${serverUrl}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const answer = (await res.json()) as any;
  return { status: res.status, code: answer.error_code, room: res.ok ? new URL(answer.room_url).searchParams.get('room') : null, ms: performance.now() - started };
}

/** The upper bound (ms) of the histogram bucket holding the p-th percentile of what the server recorded. */
function bucketCounts(metrics: string): Map<string, number> {
  const buckets = [...metrics.matchAll(/^svc_session_admission_decision_seconds_bucket\{([^}]*)\} (\d+)/gm)];
  const byLe = new Map<string, number>();
  for (const m of buckets) {
    const le = /le="([^"]+)"/.exec(m[1]!)?.[1];
    if (le) byLe.set(le, (byLe.get(le) ?? 0) + Number(m[2]));
  }
  return byLe;
}

/** The same, from cumulative bucket counts (`since`: counts to subtract, a round's start). */
function bucketPercentile(metrics: string, p: number, since?: Map<string, number>): number {
  const byLe = bucketCounts(metrics);
  if (since) for (const [le, n] of since) byLe.set(le, (byLe.get(le) ?? 0) - n);
  const total = byLe.get('+Inf') ?? 0;
  const bounds = [...byLe.keys()].filter((le) => le !== '+Inf').map(Number).sort((a, b) => a - b);
  for (const le of bounds) if ((byLe.get(String(le)) ?? 0) >= (p / 100) * total) return le * 1000;
  return Number.POSITIVE_INFINITY;
}

export async function admissionBurst(): Promise<void> {
  const database = await createTestDatabase('bench_burst');
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-burst-'));
  // The agent's limit is what a burst must meet first: the server is given room for it (the
  // operator's SVC_MAX_FACE_SESSIONS; the default on 2 cores is 6 slots, and the gate's `full`
  // would answer 503 past them before the agent's limit of 10 is reached).
  const server = await startServerProcess({ DATABASE_URL: database.url, SVC_DATA_DIR: dataDir, SVC_METRICS: 'public', SVC_MAX_FACE_SESSIONS: String(LIMIT) });
  try {
    // A load balancer sends visitors once /readyz says ready: the plugins' warm-up (the offline
    // engines, the WebRTC library) runs after listening, and a burst sent into it is decided behind it.
    await until(async () => (await fetch(`${server.url}/readyz`)).status === 200, { timeoutMs: 60_000, intervalMs: 100, what: 'the server ready (/readyz 200)' });
    const key = server.firstKey!;
    const api = async (method: string, path: string, body?: unknown) =>
      (await (await fetch(`${server.url}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })).json()) as any;
    const agentId = (await api('POST', '/v1/agents', { title: 'burst' })).agent_id as string;
    await api('PATCH', `/v1/agents/${agentId}`, { allowed_hostnames: ['*'], max_concurrency: LIMIT, advanced: { max_video_source_dimension: 256 } });
    await api('PATCH', `/v1/agents/${agentId}/status`, { status: 'published' });
    const byStatus: Record<string, number> = {};
    const refusedMs: number[] = [];
    const roundP99: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const before = bucketCounts(await (await fetch(`${server.url}/metrics`)).text());
      const body = JSON.stringify({ agent_id: agentId });
      const answers = await Promise.all(Array.from({ length: BURST }, () => (CLIENT === 'tcp' ? connectOverTcp(server.url, body) : connectOverFetch(server.url, body))));
      for (const a of answers) {
        const label = a.status === 200 ? 'admitted' : `${a.status} ${a.code}`;
        byStatus[label] = (byStatus[label] ?? 0) + 1;
        if (a.status !== 200) refusedMs.push(a.ms);
      }
      roundP99.push(bucketPercentile(await (await fetch(`${server.url}/metrics`)).text(), 99, before));
      await Promise.all(answers.filter((a) => a.room).map((a) => fetch(`${server.url}/v1/public/agents/connect/${a.room}`, { method: 'POST' })));
      // The next round starts once every released session has ended (its slot is free again).
      for (let i = 0; i < 100; i++) {
        const calls = (await api('GET', `/v1/agents/${agentId}/calls?limit=100`)).data as any[];
        if (calls.every((c) => c.status !== 'active')) break;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const figures = {
      connects: BURST * ROUNDS,
      max_concurrency: LIMIT,
      admitted: byStatus['admitted'] ?? 0,
      refused_concurrency_limit: byStatus['429 concurrency_limit'] ?? 0,
      server_errors: Object.entries(byStatus).filter(([k]) => /^5/.test(k)).reduce((n, [, v]) => n + v, 0),
      decide_p50_ms_at_most: bucketPercentile(metrics, 50),
      decide_p99_ms_at_most: bucketPercentile(metrics, 99),
      // Per round: the first burst after start against the later ones (a warm process).
      decide_p99_ms_at_most_by_round: roundP99,
      refused_answer_p50_ms: Math.round(percentile(refusedMs, 50)),
      refused_answer_p99_ms: Math.round(percentile(refusedMs, 99)),
    };
    printTable(Object.entries(byStatus).map(([answer, count]) => ({ answer, count })));
    printTable([{ 'decide p50 ms (bucket)': figures.decide_p50_ms_at_most, 'decide p99 ms (bucket)': figures.decide_p99_ms_at_most, 'refused answer p50 ms': figures.refused_answer_p50_ms, 'refused answer p99 ms': figures.refused_answer_p99_ms }]);
    printJson('sessions-admission-burst', { ...figures, database: 'postgresql', client: CLIENT, loadavg_1m: Number((await import('node:os')).loadavg()[0]!.toFixed(2)) });
  } finally {
    server.kill('SIGKILL');
    await server.exited;
    await database.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
