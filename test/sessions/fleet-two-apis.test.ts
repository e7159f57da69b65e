/**
 * The fleet (issue 26) with two API processes on two hosts (test/support/fleet-world.ts; two
 * 4-slot runners; the test process as the visitors' machine):
 *
 * 1. 40 connects at once, half through each API process, for an agent with max_concurrency 6:
 *    exactly 6 admitted (the agent's row lock holds across processes), 34 `concurrency_limit`,
 *    no runner over its slots; then 40 at once for an agent allowed 40: exactly 8 admitted (the
 *    runners' 2 x 4 slots: the runner rows, locked in the admission transaction, hold across
 *    processes), 32 `server_busy`, each runner exactly full.
 * 2. kill -9 of the API process that admitted a session: the visitor's session on the runner
 *    goes on (frames keep arriving: media never passes through the API; the visitor asks a
 *    question and is answered by the runner's bot), connects go on through
 *    the other API process, whose release ends the session, with one call record.
 *
 * Needs root and iproute2 (fails, does not skip, without them). Time bounds only catch hangs.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { speech } from './conversation-audio.ts';

const QUESTION = 'What is your name?';
const voice = new LocalTTSService();
import { FleetWorld } from '../support/fleet-world.ts';
import { sharedFleet } from '../support/fleet-tests.ts';

const SLOTS = 4;
// The runners' late-frame check off (the gate's refusals and placement's late-frame bound): on
// two cores shared with other work, the frames of the first burst's sessions ran late and the
// second burst got 2-5 of 8 (runner_full, then server_busy). What is tested here is the slot
// accounting across processes; the load bound is fleet-load's, the late-frame check the gate's.
const runner = { SVC_CAPACITY_LOAD_CHECK: 'off' };
// A start may wait behind seven others on two shared cores: the deadline (SVC_RUNNER_START_TIMEOUT_MS) is not what is tested here.
const getFleet = sharedFleet({ label: 'fleet_two_apis', apis: 2, slots: SLOTS, maxConcurrency: 6, apiEnv: { SVC_RUNNER_START_TIMEOUT_MS: '30000' }, runners: { r1: runner, r2: runner } });

/** `n` connects at once, alternately through each API process; the answers by status and error code. */
async function burst(f: FleetWorld, n: number, agentId: string): Promise<{ answers: { status: number; body: any }[]; tally: Record<string, number> }> {
  const answers = await Promise.all(Array.from({ length: n }, (_, i) => f.connect(i % 2, agentId)));
  const tally: Record<string, number> = {};
  for (const a of answers) {
    const key = a.status === 200 ? '200' : `${a.status} ${a.body.error_code}`;
    tally[key] = (tally[key] ?? 0) + 1;
  }
  return { answers, tally };
}

test.serial('two API processes, 40 connects at once: exactly max_concurrency admitted, then exactly the runners\' slots, no runner over its slots', async (t) => {
  t.timeout(300_000); // the fleet starts in the first case
  const f = await getFleet(t);
  if (!f) return;
  // What the runners reported (a burst's start-ups make their event-loop lag spike: not a bound by default).
  const loads = async () => ((await f.db.query(`select runner_id, state, load from session_runners order by runner_id`)).rows as { runner_id: string; state: string; load: { cpu_share?: number; late_frame_share?: number; event_loop_lag_ms?: number } }[])
    .map((r) => `${r.runner_id} ${r.state} cpu ${r.load.cpu_share} late ${r.load.late_frame_share} lag ${r.load.event_loop_lag_ms} ms`).join('; ');
  const before1 = await loads();
  const limited = await burst(f, 40, f.agentId);
  t.log(`max_concurrency 6: ${JSON.stringify(limited.tally)}; runners before: ${before1}; after: ${await loads()}`);
  t.deepEqual(limited.tally, { '200': 6, '429 concurrency_limit': 34 });
  for (const a of limited.answers.filter((x) => x.status === 429)) t.true(a.body.retry_after_seconds >= 1);
  const placed = await f.placedByRunner();
  t.is(Object.values(placed).reduce((a, b) => a + b, 0), 6);
  for (const [runner, n] of Object.entries(placed)) t.true(n <= SLOTS, `${runner} holds ${n} of ${SLOTS}`);
  // Every admitted session was admitted by one process or the other, and started by its runner.
  const admittedBy = [0, 1].map((api) => limited.answers.filter((a, i) => a.status === 200 && i % 2 === api).length);
  t.log(`admitted through api1/api2: ${admittedBy.join('/')}; placed ${JSON.stringify(placed)}`);
  // Each claimed by its runner. Not all `active`: once, at load 15, 5 of 6 were (the runner's
  // mark-active write is best effort: a failure is logged, not retried), so `starting` counts too.
  const statuses = (await f.db.query(`select status, count(*)::int as n from agent_sessions group by status order by status`)).rows as { status: string; n: number }[];
  t.log(`session statuses: ${JSON.stringify(statuses)}`);
  t.is(statuses.filter((r) => r.status !== 'placed').reduce((a, r) => a + r.n, 0), 6, 'none left placed and unclaimed');
  await f.releaseAll();

  // An agent allowed 40: the runners' slots are the limit, across both processes.
  const roomy = await f.makeAgent(40);
  const before = await loads();
  const full = await burst(f, 40, roomy);
  t.log(`max_concurrency 40 on 2 x ${SLOTS} slots: ${JSON.stringify(full.tally)}; runners before: ${before}; after: ${await loads()}`);
  t.deepEqual(full.tally, { '200': 2 * SLOTS, '503 server_busy': 40 - 2 * SLOTS });
  t.deepEqual(await f.placedByRunner(), { r1: SLOTS, r2: SLOTS });
  for (const a of full.answers.filter((x) => x.status === 200)) t.truthy(f.runnerOf(a.body.room_url), 'room_url on a runner');
  t.is((await f.db.query(`select count(*)::int as n from agent_calls where status = 'failed'`)).rows[0].n, 0, 'no session failed to start');
});

test.serial('kill -9 of the API process that admitted a session: the session goes on on its runner, the other API process releases it, one call record', async (t) => {
  t.timeout(180_000);
  const f = await getFleet(t);
  if (!f) return;
  const s = await f.connect(0);
  t.is(s.status, 200, JSON.stringify(s.body));
  const visitor = await f.visit(s.body);
  await until(() => visitor.videoFrames > 5, { timeoutMs: 30_000, what: 'the visitor to receive frames from its runner' });

  const api1 = f.apis[0]!;
  api1.proc.kill('SIGKILL');
  await api1.proc.exited;
  const framesAtKill = visitor.videoFrames;
  // Two heartbeats and more: the runner renews the lease itself; the API process held nothing.
  await until(() => visitor.videoFrames > framesAtKill + 100, { timeoutMs: 20_000, what: 'frames to keep arriving after the API process died' });
  t.false(visitor.signallingClosed, 'the visitor\'s signalling (on the runner) is untouched');
  t.like(await f.callOf(s.body.session_id), { status: 'active' });

  // The conversation goes on without the API process: the visitor asks, the runner's bot answers
  // (the fleet's agent has no greeting: its first bot turn is the answer).
  const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
  const seen = () => `; messages seen: ${visitor.messages.map((m) => m.message.type).join(', ') || 'none'}`;
  visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
  visitor.say(await speech(voice, QUESTION));
  await until(() => botTurns().length >= 1, { timeoutMs: 30_000, intervalMs: 20, what: () => `the answer turn, with the admitting API process dead${seen()}` });
  t.like(visitor.ofType('transcript-turn').find((m) => m.owner === 'user'), { text: QUESTION, final: true });

  // The other API process serves connects and releases.
  const other = await f.connect(1);
  t.is(other.status, 200, JSON.stringify(other.body));
  t.is(await f.release(other.body.room_url, 1), 1);
  t.is(await f.release(s.body.room_url, 1), 1);
  const call = await f.endedCall(s.body.session_id, 20_000);
  t.like(call, { status: 'completed', termination_reason: 'client_released' });
  t.is((await f.db.query(`select count(*)::int as n from agent_calls where session_id = $1`, [s.body.session_id])).rows[0].n, 1, 'one call record');
  await until(() => visitor.signallingClosed || visitor.ofType('session-ended').length > 0 || undefined, { timeoutMs: 15_000, what: 'the visitor to be told the session ended' }).catch(() => undefined);
});
