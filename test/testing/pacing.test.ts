/**
 * The streaming fakes' pacing (test/fakes/pacing.ts): chunks on a fixed timeline from the first,
 * so a stall of the fake's process delays only what was due during it.
 */
import test from 'ava';
import { VirtualClock } from '../../core/clock.ts';
import { Pacing } from '../fakes/pacing.ts';

test('slots are due on a fixed timeline from the first, however late each is claimed', (t) => {
  let now = 1_000;
  const pacing = new Pacing(() => now, 100);
  t.is(pacing.slot(), 0, 'the first slot is now');
  now = 1_100;
  t.is(pacing.slot(), 0, 'claimed on time');
  now = 1_150;
  t.is(pacing.slot(), 50, 'claimed early: the wait runs to its due time');
  // A stall: the process wakes at 1,530, past the slots due at 1,300, 1,400 and 1,500.
  now = 1_530;
  t.deepEqual([pacing.slot(), pacing.slot(), pacing.slot()], [0, 0, 0], 'overdue slots are due at once');
  t.is(pacing.untilNext(), 70, 'and the next is still due at 1,600, not 100 ms after the stall');
  t.is(pacing.slot(), 70);
});

test('on a virtual clock every wait is exactly the interval (the same as re-arming)', async (t) => {
  const clock = new VirtualClock();
  const pacing = new Pacing(() => clock.now(), 40);
  const at: number[] = [];
  const stream = (async () => {
    for (let i = 0; i < 5; i++) {
      const wait = pacing.slot();
      if (i > 0) await clock.sleep(wait);
      at.push(clock.now());
    }
  })();
  await clock.advance(1_000);
  await stream;
  t.deepEqual(at, [0, 40, 80, 120, 160]);
});
