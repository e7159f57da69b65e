/**
 * The process-wide capacity gate (server/capacity), issue 17 item 6: weighted leases up to the
 * limit, idempotent release, refusal while the process is overloaded (a real busy event loop, not
 * a simulated figure), configuration errors, and the default rule (cores x 2).
 */
import test from 'ava';
import { CapacityConfigError, createCapacityGate, defaultFaceSessionLimit } from '../../server/capacity/index.ts';
import { ConfigError, faceSessionLimitFromEnv } from '../../server/config/env.ts';

test('leases are weighted, refused when they do not fit, and release is idempotent', (t) => {
  const gate = createCapacityGate({ limit: 4, loadCheck: false });
  t.teardown(() => gate.close());
  const a = gate.tryAcquire();
  const b = gate.tryAcquire(2);
  t.truthy(a);
  t.truthy(b);
  t.is(gate.tryAcquire(2), null, '1 + 2 + 2 > 4');
  t.like(gate.snapshot(), { limit: 4, inUse: 3, leases: 2, available: 1, overloaded: false, admitted: 2, refused: { full: 1, overloaded: 0 }, lastRefusal: 'full' });
  const c = gate.tryAcquire();
  t.truthy(c);
  t.is(gate.tryAcquire(), null);
  b!.release();
  b!.release();
  t.true(b!.released);
  t.is(gate.snapshot().inUse, 2, 'a second release frees nothing more');
  t.truthy(gate.tryAcquire(2));
  a!.release();
  c!.release();
});

test('bad limits and weights are clear errors, not a silently open or closed gate', (t) => {
  for (const limit of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
    t.throws(() => createCapacityGate({ limit, loadCheck: false }), { instanceOf: CapacityConfigError }, String(limit));
  }
  const gate = createCapacityGate({ limit: 2, loadCheck: false });
  t.teardown(() => gate.close());
  for (const weight of [0, -1, Number.NaN]) t.throws(() => gate.tryAcquire(weight), { instanceOf: CapacityConfigError });
  t.is(gate.snapshot().inUse, 0);
});

test('SVC_MAX_FACE_SESSIONS: unset means the default rule; a bad value fails at start-up', (t) => {
  t.is(faceSessionLimitFromEnv({}), undefined);
  t.is(faceSessionLimitFromEnv({ SVC_MAX_FACE_SESSIONS: ' 6 ' }), 6);
  for (const bad of ['0', '-2', '2.5', 'many']) t.throws(() => faceSessionLimitFromEnv({ SVC_MAX_FACE_SESSIONS: bad }), { instanceOf: ConfigError }, bad);
  t.is(defaultFaceSessionLimit(2), 4, 'the measured 2-core figure');
  t.is(defaultFaceSessionLimit(1), 2);
  t.is(createCapacityGate({ loadCheck: false }).limit, defaultFaceSessionLimit());
});

test('while the event loop is saturated, nothing new is admitted even below the limit; admission resumes when the load is gone', async (t) => {
  const gate = createCapacityGate({ limit: 100, loadCheck: { windowMs: 300 } });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire(); // an idle gate always admits: something must run to be starved
  t.truthy(running);
  t.teardown(() => running?.release());
  // Saturate this process's event loop for longer than a window (real work, as a render would be).
  const until = performance.now() + 700;
  let x = 0;
  while (performance.now() < until) x += Math.sqrt(x + 1);
  t.true(x > 0);
  t.is(gate.tryAcquire(), null, 'refused while overloaded');
  const snap = gate.snapshot();
  t.true(snap.overloaded);
  t.is(snap.lastRefusal, 'overloaded');
  t.true((snap.eventLoopUtilization ?? 0) > 0.9, JSON.stringify(snap));
  // Idle again: within a few windows the gate admits (a bound for a loaded machine).
  let lease = null;
  for (let i = 0; i < 200 && !lease; i++) {
    await new Promise((r) => setTimeout(r, 50));
    lease = gate.tryAcquire();
  }
  t.truthy(lease, JSON.stringify(gate.snapshot()));
  lease?.release();
});
