/**
 * The capacity gate admits by what live sessions need: slots from the measured cost of a session,
 * and the lateness of the live sessions' face frames. The API's own load (a busy or lagging
 * event loop) is measured but never refuses; late frames refuse until they age out.
 */
import test from 'ava';
import { createCapacityGate, defaultFaceSessionLimit, FACE_CAPACITY, LOAD_WINDOW, LoadMeter } from '../../server/capacity/index.ts';
import { ConfigError, loadCheckFromEnv } from '../../server/config/env.ts';
import { until } from '../../testing/until.ts';

/** Keeps the event loop busy for `ms` (the load an API flood or a stuck handler makes). */
function burn(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}
const turn = () => new Promise((resolve) => setTimeout(resolve, LOAD_WINDOW.lagSampleMs * 2));

test('slots: leases up to the limit, none past it; release is idempotent and frees room', (t) => {
  const gate = createCapacityGate({ limit: 2, loadCheck: false });
  t.teardown(() => gate.close());
  const a = gate.tryAcquire()!;
  const b = gate.tryAcquire()!;
  t.truthy(a && b);
  t.is(gate.tryAcquire(), null);
  a.release();
  a.release();
  t.is(gate.inUse, 1);
  t.truthy(gate.tryAcquire());
  t.like(gate.snapshot(), { limit: 2, inUse: 2, refused: { full: 1, late_frames: 0 }, lastRefusal: 'full' });
});

test('the default slots come from the measured cost of one session after the API reserve', (t) => {
  t.is(defaultFaceSessionLimit(2), Math.floor((2 - FACE_CAPACITY.apiReserveCores) / FACE_CAPACITY.coresPerSession));
  t.is(defaultFaceSessionLimit(2), 6, 'the 2-core reference machine: 1.5 cores for sessions at 0.25 each');
  t.is(defaultFaceSessionLimit(8), 30);
  t.is(defaultFaceSessionLimit(0.5), 1, 'at least one');
});

test.serial("the API's own load never refuses: a saturated, lagging event loop still admits while frames are on time", async (t) => {
  const meter = new LoadMeter({ cores: 2, windowMs: 500 });
  const gate = createCapacityGate({ limit: 8, meter });
  t.teardown(() => {
    gate.close();
    meter.close();
  });
  const running = gate.tryAcquire();
  t.truthy(running);
  for (let i = 0; i < 60; i++) gate.recordFrameLateness(1); // the live session's frames are on time
  // Stalls as a REST flood makes them: the loop blocked 60 ms at a time, over and over.
  for (let i = 0; i < 6; i++) {
    burn(60);
    await turn();
  }
  const snap = gate.snapshot();
  t.true(snap.load.eventLoopLagMs > 40, JSON.stringify(snap.load));
  t.false(snap.lateFrames);
  const lease = gate.tryAcquire();
  t.truthy(lease, 'admitted: the lag is the API\'s to shed, not a visitor\'s to pay for');
  t.like(gate.snapshot(), { refused: { full: 0, late_frames: 0 } });
});

test.serial("the live sessions' frames leaving late refuse new work; too few frames are not judged; admitted again once they are on time", async (t) => {
  const meter = new LoadMeter({ cores: 2, windowMs: 100 });
  const gate = createCapacityGate({ limit: 8, meter });
  t.teardown(() => {
    gate.close();
    meter.close();
  });
  const late = LOAD_WINDOW.lateFrameMs + 5;
  // Nothing runs: an idle gate admits whatever the frames say (there is nothing to protect).
  for (let i = 0; i < 200; i++) gate.recordFrameLateness(late);
  const running = gate.tryAcquire();
  t.truthy(running, 'an idle gate admits');
  await until(() => gate.snapshot().load.frames === 0, { timeoutMs: 5_000, what: 'the late frames to age out' });
  // Fewer frames than the minimum, all late: one session's first second proves nothing yet.
  for (let i = 0; i < LOAD_WINDOW.minFramesForLateShare - 1; i++) gate.recordFrameLateness(late);
  t.false(gate.snapshot().lateFrames);
  const below = gate.tryAcquire();
  t.truthy(below, "49 late frames are not enough to judge");
  below?.release();
  // Enough frames, 1 in 10 late: over the 5 % bound.
  for (let i = 0; i < 60; i++) gate.recordFrameLateness(i % 10 === 0 ? late : 1);
  const busy = gate.snapshot();
  t.true(busy.load.lateFrameShare > FACE_CAPACITY.maxLateFrameShare, JSON.stringify(busy.load));
  t.true(busy.lateFrames);
  t.is(gate.tryAcquire(), null, "refused while the running sessions' frames are late");
  t.like(gate.snapshot(), { refused: { full: 0, late_frames: 1 }, lastRefusal: 'late_frames' });
  // Frames on time (one exactly at the bound is not late) until the late ones have aged out.
  await until(
    () => {
      for (let j = 0; j < 20; j++) gate.recordFrameLateness(j === 0 ? LOAD_WINDOW.lateFrameMs : 2);
      return gate.snapshot().load.lateFrameShare === 0;
    },
    { timeoutMs: 10_000, intervalMs: 20, what: 'the late frames to age out' },
  );
  const lease = gate.tryAcquire();
  t.truthy(lease, JSON.stringify(gate.snapshot()));
  lease?.release();
  running!.release();
});

test.serial("a session's start-up is not held against the process: frames reported while it starts and until it has settled are not judged; late frames after that refuse as before", async (t) => {
  const meter = new LoadMeter({ cores: 2, windowMs: 100, startupSettleMs: 300 });
  const gate = createCapacityGate({ limit: 8, meter });
  t.teardown(() => {
    gate.close();
    meter.close();
  });
  const late = LOAD_WINDOW.lateFrameMs + 5;
  const running = gate.tryAcquire()!;
  const first = gate.startingUp();
  const second = gate.startingUp();
  for (let i = 0; i < 100; i++) gate.recordFrameLateness(late);
  t.is(gate.snapshot().load.frames, 0, 'frames during start-ups are not counted');
  const admitted = gate.tryAcquire();
  t.truthy(admitted, 'admitted while two sessions start, their late first frames notwithstanding');
  first();
  first(); // idempotent: the second start-up still runs
  t.true(meter.startingUp);
  second();
  for (let i = 0; i < 100; i++) gate.recordFrameLateness(late);
  t.is(gate.snapshot().load.frames, 0, 'nor while the last start-up settles');
  await until(() => !meter.startingUp, { timeoutMs: 5_000, what: 'the start-up to settle' });
  for (let i = 0; i < 100; i++) gate.recordFrameLateness(late);
  t.is(gate.tryAcquire(), null, 'late frames once settled refuse as before');
  t.like(gate.snapshot(), { lastRefusal: 'late_frames' });
  admitted?.release();
  running.release();
});

test('a gate without the late-frame check admits by slots only', (t) => {
  const gate = createCapacityGate({ limit: 3, loadCheck: false });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire();
  for (let i = 0; i < 200; i++) gate.recordFrameLateness(500);
  gate.recordFrameLateness(Number.NaN);
  t.truthy(gate.tryAcquire());
  t.false(gate.snapshot().lateFrames);
  running?.release();
});

test('settings: SVC_CAPACITY_MAX_LATE_FRAME_SHARE in (0, 1], SVC_CAPACITY_LOAD_CHECK=off; the retired lag bound stops start-up with a line saying why', (t) => {
  t.deepEqual(loadCheckFromEnv({}), {});
  t.deepEqual(loadCheckFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: ' 0.2 ' }), { maxLateFrameShare: 0.2 });
  t.is(loadCheckFromEnv({ SVC_CAPACITY_LOAD_CHECK: 'off', SVC_CAPACITY_MAX_LATE_FRAME_SHARE: '0.2' }), false);
  for (const bad of ['0', '-0.1', '1.5', 'most', 'Infinity']) {
    t.throws(() => loadCheckFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: bad }), { instanceOf: ConfigError, message: /SVC_CAPACITY_MAX_LATE_FRAME_SHARE must be a share above 0 and at most 1/ }, bad);
  }
  t.throws(() => loadCheckFromEnv({ SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS: '40' }), { instanceOf: ConfigError, message: /SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS is no longer read.*SVC_REST_SHED_LAG_MS/ });
  // 1 never refuses: a share of late frames is at most 1.
  const gate = createCapacityGate({ limit: 4, loadCheck: loadCheckFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: '1' }) });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire();
  for (let i = 0; i < 200; i++) gate.recordFrameLateness(500);
  t.is(gate.snapshot().load.lateFrameShare, 1);
  t.truthy(gate.tryAcquire());
  running?.release();
});

test.serial('a reading is cheap and forgets: many readings in a row agree on a stall, and it is gone once its windows rolled away (issue 25)', async (t) => {
  const meter = new LoadMeter({ cores: 2, windowMs: 1000 });
  t.teardown(() => meter.close());
  burn(60);
  await turn();
  // The stall stays in the two windows a reading covers until two rolls (2 s): every reading of a
  // synchronous run sees it, whichever histogram the last reading merged into.
  const readings = Array.from({ length: 200 }, () => meter.read().eventLoopLagMs);
  t.true(readings.every((ms) => ms > 40), `the stall is read every time (${Math.min(...readings)}..${Math.max(...readings)} ms)`);
  // Two windows later, the stall's window is neither of the two a reading covers.
  await until(async () => meter.read().eventLoopLagMs < 40, { timeoutMs: 10_000, intervalMs: 50, what: 'the stall to age out of the readings' });
  t.pass();
});

test('the CPU share is a share of the machine: never over 1 when CPU time arrives in steps, not judged over a span too short to measure, exact over a steady load', async (t) => {
  const start = performance.now();
  // One core busy since the meter started, as cumulative CPU time (µs) on the meter's own clock.
  let steps = 0;
  const meter = new LoadMeter({ cores: 2, windowMs: 60_000, cpuUsage: () => ({ user: Math.round((performance.now() - start) * 1000) + steps, system: 0 }) });
  t.teardown(() => meter.close());
  steps = 5_000_000; // a bot host's report brings 5 s of CPU time at once
  t.is(meter.read().cpuShare, 0, `under ${LOAD_WINDOW.minCpuSpanMs} ms: not judged`);
  await new Promise((resolve) => setTimeout(resolve, LOAD_WINDOW.minCpuSpanMs + 20));
  t.is(meter.read().cpuShare, 1, 'the step reads as the whole machine, not more');
  steps = 0;
  const steady = meter.read().cpuShare;
  t.true(Math.abs(steady - 0.5) < 0.01, `one of two cores busy reads 0.5 (read ${steady})`);
});
