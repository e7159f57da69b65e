/**
 * The fleet (issue 26) by load, and what an operator sees of a runner, across hosts
 * (test/support/fleet-world.ts: an API host, runner hosts, 4 slots each, the test process as the
 * visitors' machine).
 *
 * 1. Load bound: runner r1 is really busy (SVC_RUNNER_TEST_BURN_CPU: a thread of its own spins
 *    on a whole core until SIGUSR2) with a CPU-share bound of 0.12. Its own heartbeat reports the
 *    load over its bound (its row, its /metrics, `svc runners list`), and new sessions go to r2
 *    although r1 has more free slots; once the burn stops and r1 reports its load under the
 *    bound again, the next session goes to r1 (the most free slots).
 * 2. /readyz of a runner: 503 (face engine loading) until it is warm, 200 once ready; SIGTERM
 *    with no session: it exits 0 at once.
 * 3. /metrics of a runner (slots, live, state, load and bound, placements, refusals, drains), and
 *    /readyz 503 `draining` while it drains a live session, which goes on until released.
 *
 * Needs root and iproute2 (fails, does not skip, without them). Time bounds only catch hangs.
 */
import test from 'ava';
import { runCli } from '../../server/cli/svc.ts';
import { until } from '../../testing/until.ts';
import { FleetWorld, RUNNER_PORT } from '../support/fleet-world.ts';
import { sharedFleet } from '../support/fleet-tests.ts';

// Far from the bound on both sides, on a machine shared with a CPU hog: burning 0.8 of a core
// against a bound of 0.2, r1 reported 0.201-0.251 under the hog (its burn got half the core it
// asked for) and fell under the bound between two checks (a CI run under stress-ng); idle, a
// runner reports a few hundredths once its windows have passed.
const BURN = '1';
const R1_CPU_BOUND = 0.12;
const getFleet = sharedFleet({
  label: 'fleet_load',
  runners: {
    r1: { SVC_RUNNER_TEST_BURN_CPU: BURN, SVC_RUNNER_MAX_CPU_SHARE: String(R1_CPU_BOUND), SVC_METRICS: 'public' },
    r2: { SVC_METRICS: 'public' },
  },
});

/** What runner `name` last wrote in its registry row. */
async function reported(f: FleetWorld, name: string): Promise<{ cpu_share: number; bound: { cpu_share: number } } | undefined> {
  return (await f.db.query(`select load from session_runners where runner_id = $1`, [name])).rows[0]?.load;
}

/** One series' value from a Prometheus text (`name{labels}` as written). */
function metric(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(`${url}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return res.text();
}

test.serial('load bound: a runner whose own reported load is over its bound gets no session although it has the most free slots; under it again, it does', async (t) => {
  t.timeout(300_000); // the fleet starts in the first case
  const f = await getFleet(t);
  if (!f) return;
  const r1 = f.runners.get('r1')!;
  // r1's heartbeat reports what its load meter measured: its process's CPU, the burn included.
  const over = await until(async () => {
    const load = await reported(f, 'r1');
    return load && load.cpu_share > load.bound.cpu_share ? load : undefined;
  }, { timeoutMs: 20_000, what: 'r1 to report its CPU share over its bound' });
  t.is(over.bound.cpu_share, R1_CPU_BOUND);
  t.log(`r1 reports cpu_share ${over.cpu_share} (bound ${over.bound.cpu_share}) while it burns ${BURN} of a core`);
  const text = await scrape(r1.url);
  t.true(metric(text, 'svc_runner_load{measure="cpu_share"}')! > R1_CPU_BOUND, 'its /metrics says the same');
  t.is(metric(text, 'svc_runner_load_bound{measure="cpu_share"}'), R1_CPU_BOUND);
  const listed: string[] = [];
  t.is(await runCli(['runners', 'list'], (line) => listed.push(line), { DATABASE_URL: f.databaseUrl }, () => undefined), 0);
  t.regex(listed.find((l) => l.startsWith('r1 ')) ?? '', /^r1 {2}ready \(not placeable\) .*\(load over its bound \(cpu_share [\d.]+ > 0\.12\)\)$/, listed.join('\n'));
  t.regex(listed.find((l) => l.startsWith('r2 ')) ?? '', /^r2 {2}ready {2}0\/4 placed/, listed.join('\n'));

  // Three sessions: each on r2, though r1 has 4 free slots to r2's 4, 3, 2.
  for (let i = 0; i < 3; i++) {
    const r = await f.connect();
    t.is(r.status, 200, JSON.stringify(r.body));
    t.is(f.runnerOf(r.body.room_url)?.name, 'r2', `session ${i + 1} is not placed on the overloaded runner`);
  }
  const still = await reported(f, 'r1');
  t.true(still!.cpu_share > R1_CPU_BOUND, `r1 was still over its bound after the connects (${still!.cpu_share})`);
  t.deepEqual(await f.placedByRunner(), { r2: 3 });

  // The burn stops: r1's next heartbeats report its load under the bound, and it takes the next one.
  r1.proc.kill('SIGUSR2');
  const under = await until(async () => {
    const load = await reported(f, 'r1');
    return load && load.cpu_share <= load.bound.cpu_share ? load : undefined;
  }, { timeoutMs: 20_000, what: 'r1 to report its CPU share under its bound' });
  t.log(`r1 reports cpu_share ${under.cpu_share} once the burn stopped`);
  const next = await f.connect();
  t.is(next.status, 200, JSON.stringify(next.body));
  t.is(f.runnerOf(next.body.room_url)?.name, 'r1', 'under its bound again, the runner with the most free slots takes it');
  t.deepEqual(await f.placedByRunner(), { r1: 1, r2: 3 });
});

test.serial('/readyz of a runner: 503 until its engines are warm, 200 once ready; SIGTERM with no session exits 0 at once', async (t) => {
  t.timeout(120_000);
  const f = await getFleet(t);
  if (!f) return;
  const host = await f.network.host('r3', { links: [{ segment: f.segment }] });
  const url = `http://${host.address}:${RUNNER_PORT}`;
  const seen: { status: number; faceEngine?: string; at: number }[] = [];
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2_000) }).catch(() => null);
      if (res) {
        const body = (await res.json().catch(() => ({}))) as { checks?: { face_engine?: string } };
        seen.push({ status: res.status, ...(body.checks?.face_engine ? { faceEngine: body.checks.face_engine } : {}), at: Date.now() });
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  })();
  const r3 = await f.startRunner('r3', { SVC_METRICS: 'public' }, host);
  const readyAt = Date.now();
  await until(() => seen.some((s) => s.status === 200 && s.at >= readyAt - 2_000) || undefined, { timeoutMs: 10_000, what: '/readyz 200 once ready' });
  polling = false;
  await poller;
  const answered = seen.filter((s) => s.at <= readyAt);
  const runs: string[] = [];
  for (const s of answered) {
    const label = `${s.status}${s.faceEngine ? ` ${s.faceEngine}` : ''}`;
    const last = runs.at(-1)?.match(/^(.*) x(\d+)$/);
    if (last && last[1] === label) runs[runs.length - 1] = `${label} x${Number(last[2]) + 1}`;
    else runs.push(`${label} x1`);
  }
  t.log(`/readyz answers before 'svc runner ready' (every 25 ms): ${runs.join(', ') || '(none)'}`);
  t.true(answered.length > 0, 'the runner answered /readyz while it was warming up');
  t.like(answered[0], { status: 503, faceEngine: 'loading' }, 'unready until warm');
  const firstOk = seen.find((s) => s.status === 200)!;
  t.true(seen.filter((s) => s.at < firstOk.at).every((s) => s.status === 503), 'never ready, then unready, then ready');
  t.is((await f.db.query(`select state from session_runners where runner_id = 'r3'`)).rows[0]?.state, 'ready');

  const termAt = Date.now();
  r3.proc.kill('SIGTERM');
  t.is(await r3.proc.exited, 0);
  t.log(`drain with no session: exit ${Date.now() - termAt} ms after SIGTERM`);
  t.true(Date.now() - termAt < 10_000, 'no session: it exits at once (bound only catches a hang)');
  t.is((await f.db.query(`select count(*)::int as n from session_runners where runner_id = 'r3'`)).rows[0].n, 0, 'its row is gone');
  f.runners.delete('r3');
});

test.serial('/metrics of a runner: slots, live, state, load, placements, refusals, drains; /readyz 503 draining while its live session goes on', async (t) => {
  t.timeout(120_000);
  const f = await getFleet(t);
  if (!f) return;
  const s = await f.connect();
  t.is(s.status, 200, JSON.stringify(s.body));
  const runner = f.runnerOf(s.body.room_url)!;
  let text = await scrape(runner.url);
  t.is(metric(text, 'svc_runner_slots'), 4);
  t.is(metric(text, 'svc_runner_live_sessions'), 1);
  t.is(metric(text, 'svc_runner_state{state="ready"}'), 1);
  t.true(metric(text, 'svc_runner_placements_total')! >= 1);
  t.is(metric(text, 'svc_runner_refusals_total{code="runner_draining"}'), 0);
  t.is(metric(text, 'svc_runner_drains_total'), 0);
  t.true(metric(text, 'svc_runner_load{measure="event_loop_lag_ms"}')! >= 0);
  t.is((await fetch(`${runner.url}/readyz`)).status, 200);
  const visitor = await f.visit(s.body);
  await until(() => visitor.videoFrames > 5, { timeoutMs: 30_000, what: 'the visitor to receive frames' });

  runner.proc.kill('SIGTERM');
  const ready = await until(async () => {
    const res = await fetch(`${runner.url}/readyz`);
    const body = (await res.json()) as { checks: { shutdown: string } };
    return res.status === 503 ? body : undefined;
  }, { timeoutMs: 5_000, what: '/readyz 503 once draining' });
  t.is(ready.checks.shutdown, 'draining');
  text = await scrape(runner.url);
  t.is(metric(text, 'svc_runner_state{state="draining"}'), 1);
  t.is(metric(text, 'svc_runner_drains_total'), 1);
  t.is(metric(text, 'svc_runner_live_sessions'), 1);
  const frames = visitor.videoFrames;
  await until(() => visitor.videoFrames > frames + 25, { timeoutMs: 15_000, what: 'frames to keep arriving while draining' });
  t.is(await f.release(s.body.room_url), 1);
  t.is(await runner.proc.exited, 0);
  t.like(await f.callOf(s.body.session_id), { status: 'completed', termination_reason: 'client_released' });
});
