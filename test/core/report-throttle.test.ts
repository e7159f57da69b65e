import test from 'ava';
import { ReportThrottle } from '../../core/report-throttle.ts';

test('a burst passes, then one report per interval carrying how many were held back', (t) => {
  let now = 0;
  const throttle = new ReportThrottle({ burst: 2, intervalMs: 1000, now: () => now });
  t.deepEqual([throttle.take(), throttle.take(), throttle.take(), throttle.take()], [0, 0, null, null]);
  now = 999;
  t.is(throttle.take(), null);
  now = 1000;
  t.is(throttle.take(), 3, 'the three held back are handed to the next report');
  t.is(throttle.take(), null);
  now = 5000;
  t.is(throttle.take(), 1);
});
