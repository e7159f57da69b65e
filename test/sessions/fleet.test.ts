/**
 * Sessions on a fleet (issue 26), across hosts (test/support/fleet-world.ts): an API host running
 * `server/main.ts` with SVC_SESSIONS=fleet (what `npm start` runs) and two runner hosts running
 * `server/runner.ts` (`npm run runner`), 4 slots each, every process bound to its namespace's
 * address; the test process is the visitors' machine.
 *
 * Cases, in order, on one fleet (each leaves it as the next expects):
 * 1. placement: 8 sessions spread over the two runners (|difference| <= 1 at every step, each
 *    runner exactly its 4 slots), a 9th is `server_busy` with retry_after_seconds, every
 *    room_url is a runner's own signalling, a visitor gets its bot's face from it, and release
 *    through the API ends each call `client_released`;
 * 2. kill -9 of a runner holding sessions: its calls end `failed`/`runner_lost` within one lease
 *    plus one reaper interval, its visitor sees the connection go, it is out of placement after
 *    its first missed heartbeat window, and connects keep succeeding on the other runner;
 * 3. SIGTERM of a runner (with the first one back under its old id): `draining` at once, no new
 *    placement on it, its live session keeps sending frames, and it exits 0 after the release.
 *
 * Needs root and iproute2 (fails, does not skip, without them). Time bounds only catch hangs.
 */
import test from 'ava';
import { runCli } from '../../server/cli/svc.ts';
import { FLEET } from '../../server/fleet/fleet-store.ts';
import { SESSION_LEASE } from '../../server/sessions/session-store.ts';
import { until } from '../../testing/until.ts';
import { FLEET_SECRET as SECRET, FleetWorld, type FleetRunner } from '../support/fleet-world.ts';
import { sharedFleet } from '../support/fleet-tests.ts';

const SLOTS = 4;

const getFleet = sharedFleet({ label: 'fleet', slots: SLOTS });

const connect = (f: FleetWorld) => f.connect();
const release = (f: FleetWorld, roomUrl: string) => f.release(roomUrl);
const runnerOf = (f: FleetWorld, roomUrl: string): FleetRunner | undefined => f.runnerOf(roomUrl);
const callOf = (f: FleetWorld, sessionId: string) => f.callOf(sessionId);

test.serial('placement: 8 sessions spread over two 4-slot runners, a 9th is server_busy; room_url reaches the runner; release through the API', async (t) => {
  t.timeout(240_000);
  const f = await getFleet(t);
  if (!f) return;
  const held = new Map<string, number>([['r1', 0], ['r2', 0]]);
  const sessions: { session_id: string; room_url: string; token: string }[] = [];
  const admit = (r: { status: number; body: any }) => {
    t.is(r.status, 200, JSON.stringify(r.body));
    const runner = runnerOf(f, r.body.room_url);
    t.truthy(runner, `room_url ${r.body.room_url} is a runner's`);
    t.true(r.body.room_url.startsWith(`${runner!.url.replace(/^http/, 'ws')}/v1/rooms/signal?room=`));
    held.set(runner!.name, held.get(runner!.name)! + 1);
    sessions.push(r.body);
  };
  // One at a time: the runner with the most free slots takes each.
  for (let i = 0; i < 4; i++) {
    admit(await connect(f));
    t.true(Math.abs(held.get('r1')! - held.get('r2')!) <= 1, `spread after ${i + 1}: ${JSON.stringify([...held])}`);
  }
  // Then at once: the runner rows, locked in the admission transaction, keep each at its slots.
  for (const r of await Promise.all(Array.from({ length: 4 }, () => connect(f)))) admit(r);
  t.deepEqual([...held], [['r1', SLOTS], ['r2', SLOTS]]);
  const ninth = await connect(f);
  t.is(ninth.status, 503);
  t.like(ninth.body, { error_code: 'server_busy' });
  t.true(ninth.body.retry_after_seconds >= 1);
  const placed = (await f.db.query(`select runner_id, count(*)::int as n from agent_sessions group by runner_id order by runner_id`)).rows;
  t.deepEqual(placed, [{ runner_id: 'r1', n: SLOTS }, { runner_id: 'r2', n: SLOTS }]);

  // The visitor joins the room on the runner (its signalling, its peer) and gets the face.
  const visitor = await f.visit(sessions[0]!);
  await until(() => visitor.videoFrames > 5, { timeoutMs: 30_000, what: 'the visitor to receive its bot\'s face from the runner' });
  // 640x360 capped at 160 on its larger side (the shorter side is at least 128: agent-face.ts).
  t.deepEqual(visitor.videoSize, { width: 160, height: 128 });
  visitor.close();

  for (const s of sessions) t.is(await release(f, s.room_url), 1);
  for (const s of sessions) {
    const c = await until(async () => {
      const row = await callOf(f, s.session_id);
      return row?.ended_at ? row : undefined;
    }, { timeoutMs: 20_000, what: 'the released call to be recorded by its runner' });
    t.like(c, { status: 'completed', termination_reason: 'client_released' });
  }
  await until(async () => (await f.db.query('select count(*)::int as n from agent_sessions')).rows[0].n === 0, { timeoutMs: 10_000, what: 'every slot free' });
});

test.serial('kill -9 of a runner: its calls end runner_lost within one lease plus one reaper interval, it leaves placement after one missed heartbeat window, connects keep succeeding on the other', async (t) => {
  t.timeout(180_000);
  const f = await getFleet(t);
  if (!f) return;
  // Two sessions on each runner (the spread puts them there).
  const live = [];
  for (let i = 0; i < 4; i++) {
    const r = await connect(f);
    t.is(r.status, 200, JSON.stringify(r.body));
    live.push(r.body);
  }
  const victim = f.runners.get('r1')!;
  const onVictim = live.filter((s) => runnerOf(f, s.room_url) === victim);
  t.is(onVictim.length, 2);
  const visitor = await f.visit(onVictim[0]);
  await until(() => visitor.videoFrames > 5, { timeoutMs: 30_000, what: 'the visitor on the doomed runner to receive frames' });

  const skipsBefore = (f.apis[0]!.proc.output.match(/runner skipped/g) ?? []).length;
  victim.proc.kill('SIGKILL');
  await victim.proc.exited;
  const killedAt = Date.now();

  // Connects go on while the dead runner's leases run out: each lands on the survivor (a start
  // sent to the dead one is refused by its host at once, and the session moved).
  const during: string[] = [];
  const first = await connect(f);
  t.is(first.status, 200, JSON.stringify(first.body));
  t.is(runnerOf(f, first.body.room_url)?.name, 'r2');
  during.push(first.body.room_url);
  const outOfPlacement = until(async () => {
    const row = (await f.db.query(`select (heartbeat_at < now() - make_interval(secs => $1)) as stale from session_runners where runner_id = 'r1'`, [FLEET.runnerStaleMs / 1000])).rows[0];
    return row?.stale ? Date.now() - killedAt : undefined;
  }, { timeoutMs: 20_000, what: 'the dead runner to leave placement' });
  const staleAfter = await outOfPlacement;
  t.log(`the dead runner left placement ${staleAfter} ms after the kill (heartbeat every ${FLEET.runnerHeartbeatMs} ms, stale after ${FLEET.runnerStaleMs} ms)`);
  t.true(staleAfter <= FLEET.runnerStaleMs + 2_000, 'out of placement after its first missed heartbeat window');
  const skipsAtStale = (f.apis[0]!.proc.output.match(/runner skipped/g) ?? []).length;
  // What an operator sees: `svc runners list`.
  const listed: string[] = [];
  t.is(await runCli(['runners', 'list'], (line) => listed.push(line), { DATABASE_URL: f.databaseUrl }, () => undefined), 0);
  t.regex(listed.find((l) => l.startsWith('r1 ')) ?? '', /^r1 {2}ready \(not placeable\) {2}2\/4 placed/, listed.join('\n'));
  t.regex(listed.find((l) => l.startsWith('r2 ')) ?? '', /^r2 {2}ready {2}[23]\/4 placed/, listed.join('\n'));
  t.log(listed.join('\n'));
  const second = await connect(f);
  t.is(second.status, 200, JSON.stringify(second.body));
  t.is(runnerOf(f, second.body.room_url)?.name, 'r2');
  during.push(second.body.room_url);
  t.is((f.apis[0]!.proc.output.match(/runner skipped/g) ?? []).length, skipsAtStale, 'no start is sent to the dead runner once it is out of placement');
  t.log(`starts sent to the dead runner (and skipped) before it left placement: ${skipsAtStale - skipsBefore}`);

  const bound = SESSION_LEASE.leaseMs + SESSION_LEASE.reaperIntervalMs;
  for (const s of onVictim) {
    const c = await until(async () => {
      const row = await callOf(f, s.session_id);
      return row?.ended_at ? row : undefined;
    }, { timeoutMs: bound + 15_000, what: 'the dead runner\'s call to end' });
    t.like(c, { status: 'failed', termination_reason: 'runner_lost', failure_reason: 'runner_lost' });
  }
  const endedAfter = Date.now() - killedAt;
  t.log(`the dead runner's calls ended runner_lost ${endedAfter} ms after the kill (bound ${bound} ms)`);
  t.true(endedAfter <= bound + 3_000, `within one lease plus one reaper interval (${bound} ms) and a margin for a loaded machine`);
  // Its signalling socket closes with the process (a page ends the call on it), or its media path goes.
  await until(() => visitor.signallingClosed || ['disconnected', 'failed', 'closed'].includes(visitor.connectionState), { timeoutMs: 40_000, what: 'the visitor to see its connection go' });
  visitor.close();

  // The survivor's sessions are untouched; released, they end as released.
  for (const s of live.filter((x) => runnerOf(f, x.room_url)?.name === 'r2')) {
    t.is(await release(f, s.room_url), 1);
  }
  for (const url of during) t.is(await release(f, url), 1);
  await until(async () => (await f.db.query(`select count(*)::int as n from agent_sessions`)).rows[0].n === 0, { timeoutMs: 20_000, what: 'every slot free' });
});

test.serial('SIGTERM of a runner: draining at once, no new placement on it, its live session keeps its frames until released, then it exits 0', async (t) => {
  t.timeout(180_000);
  const f = await getFleet(t);
  if (!f) return;
  // The killed runner comes back under its old id: it takes new sessions, and had none left.
  await f.startRunner('r1');
  const r2 = f.runners.get('r2')!;
  // Two sessions: one on each runner (both empty: the spread).
  const a = await connect(f);
  const b = await connect(f);
  t.is(a.status, 200);
  t.is(b.status, 200);
  const onR2 = [a.body, b.body].find((s) => runnerOf(f, s.room_url) === r2);
  const onR1 = [a.body, b.body].find((s) => runnerOf(f, s.room_url)?.name === 'r1');
  const skips = () => f.apis[0]!.proc.output.split('\n').filter((l) => l.includes('runner skipped')).slice(-3).join('\n');
  t.truthy(onR2, `one session on each runner; last skips:\n${skips()}`);
  t.truthy(onR1, `one session on each runner; last skips:\n${skips()}`);
  const visitor = await f.visit(onR2);
  await until(() => visitor.videoFrames > 5, { timeoutMs: 30_000, what: 'the visitor to receive frames from r2' });

  r2.proc.kill('SIGTERM');
  const state = await until(async () => (await f.db.query(`select state from session_runners where runner_id = 'r2'`)).rows[0]?.state === 'draining' || undefined, { timeoutMs: 5_000, what: 'r2 to say draining' });
  t.true(state);
  // New sessions go to r1 only, until it is full; then server_busy (r2 has free slots, but drains).
  const placedNow = [];
  for (let i = 0; i < SLOTS - 1; i++) {
    const r = await connect(f);
    t.is(r.status, 200, JSON.stringify(r.body));
    t.is(runnerOf(f, r.body.room_url)?.name, 'r1', 'no placement on the draining runner');
    placedNow.push(r.body);
  }
  const busy = await connect(f);
  t.is(busy.status, 503);
  t.like(busy.body, { error_code: 'server_busy' });

  // The live session on r2 goes on: frames keep arriving after the SIGTERM.
  const framesAtTerm = visitor.videoFrames;
  await until(() => visitor.videoFrames > framesAtTerm + 50, { timeoutMs: 15_000, what: 'frames to keep arriving while r2 drains' });
  t.is(r2.proc.child.exitCode, null, 'r2 waits for its live session');
  t.is(await release(f, onR2.room_url), 1);
  t.is(await r2.proc.exited, 0);
  t.like(await callOf(f, onR2.session_id), { status: 'completed', termination_reason: 'client_released' });
  t.is((await f.db.query(`select count(*)::int as n from session_runners where runner_id = 'r2'`)).rows[0].n, 0, 'its registry row is gone');
  visitor.close();
  for (const s of [onR1, ...placedNow]) t.is(await release(f, s.room_url), 1);
});

test.serial('a start request without or with a wrong runner secret is refused 401 and logged without the secret', async (t) => {
  t.timeout(30_000);
  const f = await getFleet(t);
  if (!f) return;
  const runner = f.runners.get('r1')!;
  const wrong = 'not-the-runner-secret-abcdef';
  const start = (authorization?: string) =>
    fetch(`${runner.url}/internal/runner/v1/sessions/00000000-0000-4000-8000-000000000000/start`, { method: 'POST', headers: authorization ? { authorization } : {} });
  const missing = await start();
  t.is(missing.status, 401);
  t.like(await missing.json(), { error_code: 'unauthorized' });
  const bad = await start(`Bearer ${wrong}`);
  t.is(bad.status, 401);
  await until(() => (runner.proc.output.match(/runner request refused \(401\)/g) ?? []).length >= 2, { timeoutMs: 5_000, what: 'both refusals logged' });
  t.true(runner.proc.output.includes('wrong runner secret'));
  t.true(runner.proc.output.includes('no runner secret'));
  t.false(runner.proc.output.includes(wrong), 'the wrong secret is not in the log');
  t.false(runner.proc.output.includes(SECRET), 'nor the right one');
  const right = await start(`Bearer ${SECRET}`);
  t.is(right.status, 409, 'the right secret gets to the session check (no such session placed here)');
});
