import test from 'ava';
import { CapacityConfigError, createCapacityGate, FACE_CAPACITY } from '../../server/capacity/capacity-gate.ts';
import { ConfigError, loadCheckFromEnv } from '../../server/config/env.ts';

/** Keeps the event loop busy for `ms` (the load the gate measures). */
function burn(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

test('the count limit: leases up to the limit, none past it; release is idempotent and frees room', (t) => {
  const gate = createCapacityGate({ limit: 2, loadCheck: false });
  const a = gate.tryAcquire()!;
  const b = gate.tryAcquire()!;
  t.truthy(a && b);
  t.is(gate.tryAcquire(), null);
  a.release();
  a.release();
  t.is(gate.snapshot().inUse, 1);
  t.truthy(gate.tryAcquire());
  t.like(gate.snapshot(), { limit: 2, inUse: 2, refused: { full: 1, overloaded: 0 } });
  gate.close();
});

test('an overloaded process refuses new work while something runs, but an idle gate always admits one', (t) => {
  const gate = createCapacityGate({ limit: 4, loadCheck: { windowMs: 200, maxEventLoopUtilization: 0.5 } });
  burn(300);
  const first = gate.tryAcquire();
  t.truthy(first, 'nothing is running: the first session is admitted despite the burst');
  burn(300);
  t.is(gate.tryAcquire(), null, 'a session runs and the loop is saturated: refused');
  t.is(gate.snapshot().refused.overloaded, 1);
  first!.release();
  t.truthy(gate.tryAcquire(), 'idle again: admitted');
  gate.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
// The lag tests run one at a time: another test's busy loop would be a stall in theirs.
/** Bounds other than the lag's that nothing here can reach: only the lag decides. */
const LAG_ONLY = { maxEventLoopUtilization: 1, maxCpuShare: 100 } as const;

test.serial('event-loop lag past the bound refuses new work while utilization and CPU stay below theirs; admitted again once the lag falls', async (t) => {
  const gate = createCapacityGate({ limit: 4, loadCheck: { windowMs: 500, maxEventLoopLagMs: 100, ...LAG_ONLY } });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire(); // an idle gate always admits: something must run to be starved
  t.truthy(running);
  // Repeated stalls, as a saturated process has them: the loop blocked 150 ms, then free 100 ms,
  // for more than a window. Every stall is a turn 140 ms late; the loop is busy about 60 % of the time.
  for (let i = 0; i < 5; i++) {
    burn(150);
    await sleep(100);
  }
  const busy = gate.snapshot();
  t.true(busy.eventLoopLagMs! > 100, JSON.stringify(busy));
  t.true(busy.eventLoopUtilization! < 1);
  t.true(busy.overloaded);
  t.is(gate.tryAcquire(), null, 'refused while the lag is past the bound');
  t.like(gate.snapshot(), { refused: { full: 0, overloaded: 1 }, lastRefusal: 'overloaded' });
  // The stalls stopped: within a couple of windows the lag falls and the gate admits (a bound for a loaded machine).
  let lease = null;
  for (let i = 0; i < 200 && !lease; i++) {
    await sleep(50);
    lease = gate.tryAcquire();
  }
  t.truthy(lease, JSON.stringify(gate.snapshot()));
  t.true(gate.snapshot().eventLoopLagMs! <= 100);
  lease?.release();
  running!.release();
});

test.serial('a single stall among a window of turns does not refuse: the bound is on the p99, not on one late turn', async (t) => {
  const gate = createCapacityGate({ limit: 4, loadCheck: { windowMs: 1000, maxEventLoopLagMs: 100, ...LAG_ONLY } });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire();
  t.truthy(running);
  await sleep(1100); // a full window of idle turns (about 100 samples)
  burn(300); // one turn 290 ms late: a bot starting, a full GC
  await sleep(200);
  const snap = gate.snapshot();
  t.true(snap.eventLoopLagMs! < 100, JSON.stringify(snap));
  const lease = gate.tryAcquire();
  t.truthy(lease, JSON.stringify(gate.snapshot()));
  lease?.release();
  running!.release();
});

test.serial('the lag bound: FACE_CAPACITY default (one face frame), SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS, SVC_CAPACITY_LOAD_CHECK=off still turns every load criterion off', async (t) => {
  t.is(FACE_CAPACITY.maxEventLoopLagMs, 40);
  t.deepEqual(loadCheckFromEnv({}), {});
  t.deepEqual(loadCheckFromEnv({ SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS: ' 75 ' }), { maxEventLoopLagMs: 75 });
  t.deepEqual(loadCheckFromEnv({ SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS: '12.5' }), { maxEventLoopLagMs: 12.5 });
  t.is(loadCheckFromEnv({ SVC_CAPACITY_LOAD_CHECK: 'off', SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS: '75' }), false);
  for (const bad of ['0', '-5', 'soon', 'Infinity']) {
    t.throws(() => loadCheckFromEnv({ SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS: bad }), { instanceOf: ConfigError, message: /SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS must be a positive number of milliseconds/ }, bad);
  }
  t.throws(() => createCapacityGate({ loadCheck: { maxEventLoopLagMs: 0 } }), { instanceOf: CapacityConfigError });

  const gate = createCapacityGate({ limit: 4, loadCheck: loadCheckFromEnv({ SVC_CAPACITY_LOAD_CHECK: 'off' }) });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire();
  burn(300);
  const lease = gate.tryAcquire();
  t.truthy(lease, 'load check off: admitted by count inside a stall');
  t.is(gate.snapshot().eventLoopLagMs, undefined);
  lease?.release();
  running?.release();
});

test.serial('face frames leaving late refuse new work while the loop itself looks fine; too few frames are not judged; admitted again once they are on time', async (t) => {
  // Only the late share can refuse here: the loop, its utilization and the CPU share have bounds nothing reaches.
  const gate = createCapacityGate({ limit: 8, loadCheck: { windowMs: 200, maxEventLoopLagMs: 10_000, ...LAG_ONLY } });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire();
  t.truthy(running);
  const late = FACE_CAPACITY.lateFrameMs + 5;
  // Fewer frames than the minimum, all late: one session's first second proves nothing yet.
  for (let i = 0; i < FACE_CAPACITY.minFramesForLateShare - 1; i++) gate.recordFrameLateness(late);
  t.is(gate.snapshot().lateFrameShare, 0);
  t.false(gate.snapshot().overloaded);
  // Enough frames, 1 in 10 late: over the 5 % bound.
  for (let i = 0; i < 60; i++) gate.recordFrameLateness(i % 10 === 0 ? late : 1);
  const busy = gate.snapshot();
  t.true(busy.lateFrameShare! > FACE_CAPACITY.maxLateFrameShare, JSON.stringify(busy));
  t.true(busy.eventLoopLagMs! < 10_000);
  t.is(gate.tryAcquire(), null, 'refused while the running sessions\' frames are late');
  t.like(gate.snapshot(), { refused: { full: 0, overloaded: 1 }, lastRefusal: 'overloaded' });
  // Frames on time (a late frame exactly at the bound is not late) for more than two windows: the late ones age out.
  for (let i = 0; i < 3; i++) {
    await sleep(250);
    for (let j = 0; j < 60; j++) gate.recordFrameLateness(j === 0 ? FACE_CAPACITY.lateFrameMs : 2);
  }
  t.is(gate.snapshot().lateFrameShare, 0, JSON.stringify(gate.snapshot()));
  const lease = gate.tryAcquire();
  t.truthy(lease, JSON.stringify(gate.snapshot()));
  lease?.release();
  running!.release();
});

test('the late-frame bound from SVC_CAPACITY_MAX_LATE_FRAME_SHARE: a share in (0, 1], anything else stops start-up; with the lag bound too', (t) => {
  t.deepEqual(loadCheckFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: ' 0.2 ' }), { maxLateFrameShare: 0.2 });
  t.deepEqual(loadCheckFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: '1', SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS: '75' }), { maxEventLoopLagMs: 75, maxLateFrameShare: 1 });
  t.is(loadCheckFromEnv({ SVC_CAPACITY_LOAD_CHECK: 'off', SVC_CAPACITY_MAX_LATE_FRAME_SHARE: '0.2' }), false);
  for (const bad of ['0', '-0.1', '1.5', 'most', 'Infinity']) {
    t.throws(() => loadCheckFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: bad }), { instanceOf: ConfigError, message: /SVC_CAPACITY_MAX_LATE_FRAME_SHARE must be a share above 0 and at most 1/ }, bad);
  }
  // 1 never refuses: a share of late frames is at most 1.
  const gate = createCapacityGate({ limit: 4, loadCheck: { ...loadCheckFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: '1' }), maxEventLoopLagMs: 10_000, ...LAG_ONLY } });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire();
  for (let i = 0; i < 200; i++) gate.recordFrameLateness(500);
  t.is(gate.snapshot().lateFrameShare, 1);
  const lease = gate.tryAcquire();
  t.truthy(lease, JSON.stringify(gate.snapshot()));
  lease?.release();
  running?.release();
});

test('a gate without the load check ignores frame lateness (admits by count only)', (t) => {
  const gate = createCapacityGate({ limit: 3, loadCheck: false });
  const running = gate.tryAcquire();
  for (let i = 0; i < 200; i++) gate.recordFrameLateness(500);
  gate.recordFrameLateness(Number.NaN);
  t.truthy(gate.tryAcquire());
  t.is(gate.snapshot().lateFrameShare, undefined);
  running?.release();
  gate.close();
});
