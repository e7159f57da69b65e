/**
 * `npm run bench -- fleet`: sessions on a fleet (issue 26, docs/deployment.md) across hosts, the
 * world of the fleet tests (test/support/fleet-world.ts: network namespaces, an API host running
 * `npm start` with SVC_SESSIONS=fleet, two runner hosts running `npm run runner`, PostgreSQL
 * through a relay; the bench process is the visitors' machine, its visitors headless libwebrtc
 * peers in this process).
 *
 * Figures (one table, one JSON line `{"bench":"fleet",...}`, with the machine's load average
 * beside them: the machine may be shared):
 * - connect to first avatar frame: from the connect request to the API process to the first
 *   decoded video frame from the runner, 640x360 faces, sessions one after the other (p50, p99);
 * - placement decision: the admission + placement transaction (FleetStore.admitAndPlace, the
 *   code an API process runs) from this process straight to PostgreSQL, sequential (p50, p99);
 *   each placed session is removed at once so that no runner fills;
 * - runner CPU per live 640x360 session, in cores: the runner process's own CPU time from
 *   /proc/<pid>/task/* over a window with FLEET_BENCH_SESSIONS sessions (default 3) whose
 *   visitors receive the face, minus the same runner idle over the same length, divided by the
 *   sessions; by thread group (thread names, digits dropped); the sessions per core it implies;
 * - drain: SIGTERM to exit of a runner with no session, and with one live session released
 *   FLEET_BENCH_DRAIN_HOLD_MS (default 2000) after the signal (the time after the release too).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { FleetStore } from '../server/fleet/fleet-store.ts';
import { newRoomName } from '../server/sessions/live-sessions.ts';
import { SESSION_LEASE, SessionStore } from '../server/sessions/session-store.ts';
import { openDatabase, closeDatabase } from '../server/db/connect.ts';
import { until } from '../testing/until.ts';
import { available, FleetWorld, type FleetRunner } from '../test/support/fleet-world.ts';
import { percentile, printJson, printTable } from './table.ts';

const CONNECTS = Number(process.env.FLEET_BENCH_CONNECTS ?? 10);
const DECISIONS = Number(process.env.FLEET_BENCH_DECISIONS ?? 200);
const SESSIONS = Number(process.env.FLEET_BENCH_SESSIONS ?? 3);
const WINDOW_MS = Number(process.env.FLEET_BENCH_WINDOW_MS ?? 10_000);
const DRAIN_HOLD_MS = Number(process.env.FLEET_BENCH_DRAIN_HOLD_MS ?? 2_000);
/** SVC_HEAP_GROWING_PERCENT for the runners (unset: the product's default; `v8`: V8's own heuristic). */
const HEAP_GROWTH = process.env.FLEET_BENCH_HEAP_GROWTH;
const TICKS_PER_SECOND = 100;

/** CPU ticks (user + system) of each thread of `pid`, by thread name. */
function threadTicks(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // the thread ended meanwhile
    }
    const open = stat.indexOf('(');
    const close = stat.lastIndexOf(')');
    const name = stat.slice(open + 1, close);
    const fields = stat.slice(close + 2).split(' ');
    // Fields after the name: state is [0], utime [11], stime [12] (stat(5): 14 and 15).
    const ticks = Number(fields[11]) + Number(fields[12]);
    out.set(`${tid}:${name}`, ticks);
  }
  return out;
}

/** Cores used per thread group over `ms` (threads of one name, digits dropped, summed). */
async function cpuOver(pid: number, ms: number): Promise<{ total: number; groups: Record<string, number> }> {
  const before = threadTicks(pid);
  const startedAt = performance.now();
  await new Promise((resolve) => setTimeout(resolve, ms));
  const after = threadTicks(pid);
  const seconds = (performance.now() - startedAt) / 1000;
  const groups: Record<string, number> = {};
  for (const [key, ticks] of after) {
    const name = key.slice(key.indexOf(':') + 1).replace(/[\d]+/g, '#').trim() || '?';
    const used = ticks - (before.get(key) ?? 0);
    groups[name] = (groups[name] ?? 0) + used / TICKS_PER_SECOND / seconds;
  }
  const total = Object.values(groups).reduce((a, b) => a + b, 0);
  return { total, groups };
}

const round = (n: number, digits = 1) => Number(n.toFixed(digits));

/** The runner's full (mark-compact) collections so far and their main-thread seconds, from its own /metrics. */
async function fullCollections(runner: FleetRunner): Promise<{ count: number; seconds: number }> {
  const text = await (await fetch(`${runner.url}/metrics`)).text();
  const lines = text.split('\n');
  if (!lines.some((l) => l.startsWith('# TYPE nodejs_gc_duration_seconds '))) throw new Error(`runner ${runner.name}'s /metrics has no nodejs_gc_duration_seconds`);
  // A kind with no collection yet has no series.
  const value = (series: string) => Number(lines.find((l) => l.startsWith(`${series} `))?.slice(series.length + 1) ?? 0);
  return { count: value('nodejs_gc_duration_seconds_count{kind="major"}'), seconds: value('nodejs_gc_duration_seconds_sum{kind="major"}') };
}

/** Resident memory of `pid` (MB). */
const residentMb = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;

export async function run(): Promise<void> {
  if (!(await available())) {
    console.error('bench fleet needs root and iproute2 (ip netns)');
    process.exitCode = 1;
    return;
  }
  const loadStart = loadavg()[0]!;
  // The runners' /metrics are read for their garbage collections (the bench is on their network).
  const runnerEnv = { SVC_METRICS: 'public', ...(HEAP_GROWTH ? { SVC_HEAP_GROWING_PERCENT: HEAP_GROWTH } : {}) };
  const world = await FleetWorld.create({ label: 'bench_fleet', apiEnv: { SVC_RUNNER_START_TIMEOUT_MS: '20000' }, runners: { r1: runnerEnv, r2: runnerEnv } });
  try {
    const agent = await world.makeAgent(40, null);

    // 1. Connect to first avatar frame, one session at a time.
    const firstFrame: number[] = [];
    const connectOnly: number[] = [];
    for (let i = 0; i < CONNECTS; i++) {
      const startedAt = performance.now();
      const r = await world.connect(0, agent);
      if (r.status !== 200) throw new Error(`connect ${i + 1}: ${r.status} ${JSON.stringify(r.body)}`);
      connectOnly.push(r.ms);
      const visitor = await world.visit(r.body);
      await until(() => visitor.videoFrames > 0, { timeoutMs: 30_000, intervalMs: 2, what: 'the first avatar frame' });
      firstFrame.push(performance.now() - startedAt);
      await world.releaseAll();
    }

    // 2. Placement decisions: the API process's transaction, straight to PostgreSQL.
    const db = openDatabase({ databaseUrl: world.databaseUrl, pgliteDir: '' });
    const decisions: number[] = [];
    try {
      const store = new SessionStore(db, 'bench-fleet-api', { leaseMs: SESSION_LEASE.leaseMs });
      const fleet = new FleetStore(db, { leaseMs: SESSION_LEASE.leaseMs });
      for (let i = 0; i < DECISIONS + 10; i++) {
        const startedAt = performance.now();
        const admission = await fleet.admitAndPlace(store, { agentId: agent, room: newRoomName(), roomProvider: 'embedded', clientUserRef: null, origin: null });
        const ms = performance.now() - startedAt;
        if (!admission.admitted) throw new Error(`decision ${i + 1} refused: ${JSON.stringify(admission)}`);
        if (i >= 10) decisions.push(ms); // the first ones warm the connection pool and the plans
        await db('agent_sessions').where('session_id', admission.sessionId).delete();
        await db('agent_calls').where('call_id', admission.callId).delete();
      }
    } finally {
      await closeDatabase(db);
    }

    // 3. Drain with no session: r2 goes.
    const r2 = world.runners.get('r2')!;
    const drainEmpty = await drain(r2);
    world.runners.delete('r2');

    // 4. Runner CPU per live session: r1 idle, then with SESSIONS live sessions whose visitors get the face.
    const r1 = world.runners.get('r1')!;
    const idle = await cpuOver(r1.proc.pid, WINDOW_MS);
    const visitors: Awaited<ReturnType<FleetWorld['visit']>>[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const r = await world.connect(0, agent);
      if (r.status !== 200) throw new Error(`session ${i + 1}: ${r.status} ${JSON.stringify(r.body)}; runners: ${JSON.stringify((await world.db.query('select runner_id, state, load from session_runners')).rows)}`);
      const visitor = await world.visit(r.body);
      visitors.push(visitor);
    }
    await until(() => visitors.every((v) => v.videoFrames > 25), { timeoutMs: 30_000, what: 'every visitor to receive frames' });
    await new Promise((resolve) => setTimeout(resolve, 3_000)); // past the start-ups
    const framesBefore = visitors.map((v) => v.videoFrames);
    const gcBefore = await fullCollections(r1);
    const busy = await cpuOver(r1.proc.pid, WINDOW_MS);
    const gcAfter = await fullCollections(r1);
    const fullGcs = { count: gcAfter.count - gcBefore.count, mainMs: (gcAfter.seconds - gcBefore.seconds) * 1000 };
    const rssMb = residentMb(r1.proc.pid);
    const fps = visitors.map((v, i) => (v.videoFrames - framesBefore[i]!) / (WINDOW_MS / 1000));
    const perSession = (busy.total - idle.total) / SESSIONS;
    const size = visitors[0]!.videoSize;
    await world.releaseAll();

    // 5. Drain with one live session, released DRAIN_HOLD_MS after the signal.
    const held = await world.connect(0, agent);
    if (held.status !== 200) throw new Error(`drain session: ${held.status} ${JSON.stringify(held.body)}; runners: ${JSON.stringify((await world.db.query('select runner_id, state, load from session_runners')).rows)}`);
    const visitor = await world.visit(held.body);
    await until(() => visitor.videoFrames > 5, { timeoutMs: 30_000, what: 'frames before the drain' });
    const drainLive = await drain(r1, async () => {
      await new Promise((resolve) => setTimeout(resolve, DRAIN_HOLD_MS));
      const releasedAt = performance.now();
      await world.release(held.body.room_url);
      return releasedAt;
    });

    const loadEnd = loadavg()[0]!;
    const groups = Object.entries(busy.groups)
      .map(([name, cores]) => ({ name, cores, idle: idle.groups[name] ?? 0 }))
      .filter((g) => g.cores >= 0.005)
      .sort((a, b) => b.cores - a.cores);
    printTable([
      { figure: 'connect -> first avatar frame p50', value: round(percentile(firstFrame, 50)), unit: 'ms', note: `${CONNECTS} sessions, ${size ? `${size.width}x${size.height}` : '?'}` },
      { figure: 'connect -> first avatar frame p99', value: round(percentile(firstFrame, 99)), unit: 'ms', note: 'goal < 1000' },
      { figure: 'connect answered p50 / p99', value: `${round(percentile(connectOnly, 50))} / ${round(percentile(connectOnly, 99))}`, unit: 'ms', note: 'the Session returned (bot started on the runner)' },
      { figure: 'placement decision p50', value: round(percentile(decisions, 50), 2), unit: 'ms', note: `${DECISIONS} admission + placement transactions` },
      { figure: 'placement decision p99', value: round(percentile(decisions, 99), 2), unit: 'ms', note: 'goal < 20' },
      { figure: 'runner CPU idle', value: round(idle.total, 3), unit: 'cores', note: `${WINDOW_MS / 1000} s` },
      { figure: `runner CPU, ${SESSIONS} live sessions`, value: round(busy.total, 3), unit: 'cores', note: `visitors' fps ${fps.map((f) => round(f)).join(', ')}` },
      { figure: 'runner CPU per live session', value: round(perSession, 3), unit: 'cores', note: `goal <= 0.15; ${round(1 / perSession)} sessions per core` },
      { figure: 'runner full GCs in the window', value: fullGcs.count, unit: '', note: `${round(fullGcs.mainMs)} ms of main-thread pauses; heap growth ${HEAP_GROWTH ?? 'default'} (SVC_HEAP_GROWING_PERCENT)` },
      { figure: 'runner resident memory', value: round(rssMb), unit: 'MB', note: `${SESSIONS} live sessions` },
      { figure: 'drain, no session', value: round(drainEmpty.exitMs), unit: 'ms', note: 'SIGTERM -> exit 0' },
      { figure: 'drain, one live session', value: round(drainLive.exitMs), unit: 'ms', note: `released ${DRAIN_HOLD_MS} ms after SIGTERM; exit ${round(drainLive.afterReleaseMs ?? NaN)} ms after the release` },
      { figure: 'loadavg 1 min (start / end)', value: `${round(loadStart, 2)} / ${round(loadEnd, 2)}`, unit: '', note: 'the machine may be shared' },
    ]);
    console.log('\nrunner CPU by thread group, with the sessions live (cores; idle beside):');
    printTable(groups.map((g) => ({ threads: g.name, cores: round(g.cores, 3), idle: round(g.idle, 3), per_session: round((g.cores - g.idle) / SESSIONS, 3) })));
    printJson('fleet', {
      connects: CONNECTS,
      face: size ? `${size.width}x${size.height}` : null,
      first_frame_p50_ms: round(percentile(firstFrame, 50)),
      first_frame_p99_ms: round(percentile(firstFrame, 99)),
      connect_p50_ms: round(percentile(connectOnly, 50)),
      connect_p99_ms: round(percentile(connectOnly, 99)),
      decisions: DECISIONS,
      placement_decision_p50_ms: round(percentile(decisions, 50), 2),
      placement_decision_p99_ms: round(percentile(decisions, 99), 2),
      live_sessions: SESSIONS,
      runner_idle_cores: round(idle.total, 3),
      runner_busy_cores: round(busy.total, 3),
      runner_cores_per_session: round(perSession, 3),
      sessions_per_core: round(1 / perSession),
      visitor_fps: fps.map((f) => round(f)),
      runner_full_gcs: fullGcs.count,
      runner_full_gc_main_ms: round(fullGcs.mainMs),
      runner_rss_mb: round(rssMb),
      heap_growth: HEAP_GROWTH ?? 'default',
      runner_threads: Object.fromEntries(groups.map((g) => [g.name, round(g.cores, 3)])),
      drain_empty_ms: round(drainEmpty.exitMs),
      drain_one_live_ms: round(drainLive.exitMs),
      drain_after_release_ms: round(drainLive.afterReleaseMs ?? NaN),
      loadavg_1m: round(loadStart, 2),
      loadavg_1m_end: round(loadEnd, 2),
    });
  } finally {
    await world.close();
  }
}

/** SIGTERM to `runner`, then `meanwhile` (a release: its time returned); the times to its exit. */
async function drain(runner: FleetRunner, meanwhile?: () => Promise<number>): Promise<{ exitMs: number; afterReleaseMs?: number }> {
  const signalledAt = performance.now();
  runner.proc.kill('SIGTERM');
  const releasedAt = meanwhile ? await meanwhile() : undefined;
  const code = await runner.proc.exited;
  const exitedAt = performance.now();
  if (code !== 0) throw new Error(`runner ${runner.name} exited ${code} after SIGTERM`);
  return { exitMs: exitedAt - signalledAt, ...(releasedAt !== undefined ? { afterReleaseMs: exitedAt - releasedAt } : {}) };
}
