/**
 * The process-wide capacity gate (server/capacity), issue 17 item 6 and issue 25: weighted leases
 * up to the limit, idempotent release, configuration errors, the default rule (slots from the
 * measured cost of a session), and a saturated event loop that does not refuse (only late frames do).
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
  t.like(gate.snapshot(), { limit: 4, inUse: 3, leases: 2, available: 1, lateFrames: false, admitted: 2, refused: { full: 1, late_frames: 0 }, lastRefusal: 'full' });
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
  t.is(defaultFaceSessionLimit(2), 6, 'the 2-core reference machine: (2 - 0.5) / 0.25');
  t.is(defaultFaceSessionLimit(1), 2);
  t.is(createCapacityGate({ loadCheck: false }).limit, defaultFaceSessionLimit());
});

test('a saturated event loop alone refuses nothing: the API sheds its own load, visitors are refused only for slots or late frames', (t) => {
  const gate = createCapacityGate({ limit: 100 });
  t.teardown(() => gate.close());
  const running = gate.tryAcquire();
  t.truthy(running);
  t.teardown(() => running?.release());
  // Saturate this process's event loop for longer than a load window (real work, as a render would be).
  const until = performance.now() + 2500;
  let x = 0;
  while (performance.now() < until) x += Math.sqrt(x + 1);
  t.true(x > 0);
  const snap = gate.snapshot();
  t.true(snap.load.eventLoopUtilization > 0.9, JSON.stringify(snap.load));
  const lease = gate.tryAcquire();
  t.truthy(lease, 'admitted: no frame was late');
  lease?.release();
});
