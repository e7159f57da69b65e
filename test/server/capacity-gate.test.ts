import test from 'ava';
import { createCapacityGate } from '../../server/capacity/capacity-gate.ts';

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
