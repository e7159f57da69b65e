/**
 * The fleet's registry rows as placement reads them (server/fleet/fleet-store.ts): a row written
 * by another process is checked, never trusted (a bad one is skipped with its reason), its load is
 * judged against the bound its runner reported, and the runner's bound settings (config/env.ts).
 * Light: no process, no database (the placement itself is tested across hosts in fleet*.test.ts).
 */
import test from 'ava';
import { ConfigError, runnerLoadBoundFromEnv, runnerTestBurnFromEnv } from '../../server/config/env.ts';
import { checkRunnerRow, FLEET, loadRatio, overBound } from '../../server/fleet/fleet-store.ts';
import { countByRunner, RUNNER_COUNTERS_KEPT } from '../../server/fleet/fleet-sessions.ts';

const row = (over: Record<string, unknown> = {}) => ({ runner_id: 'r1', url: 'http://10.1.2.3:8090', slots: 4, load: {}, ...over });

test('a well-formed row: its url origin, slots, load (0 until measured) and the default bound', (t) => {
  const checked = checkRunnerRow(row({ url: 'http://10.1.2.3:8090/' }));
  t.like(checked, { ok: true, runnerId: 'r1', url: 'http://10.1.2.3:8090', slots: 4, load: { cpu_share: 0, late_frame_share: 0, event_loop_lag_ms: 0 }, bound: FLEET.loadBound, over: [] });
  // pg returns jsonb parsed; a string (another driver) is parsed too.
  t.like(checkRunnerRow(row({ load: '{"cpu_share":0.5}' })), { ok: true, load: { cpu_share: 0.5 } });
});

test('malformed rows are refused with the reason, never thrown on', (t) => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ url: null }, /url is null/],
    [{ url: 42 }, /url is number/],
    [{ url: 'not a url' }, /is not a URL/],
    [{ url: 'javascript:alert(1)' }, /not http\(s\)/],
    [{ url: 'ftp://host:21' }, /not http\(s\)/],
    [{ slots: -1 }, /slots -1/],
    [{ slots: 1.5 }, /slots 1.5/],
    [{ slots: 'many' }, /slots "many"/],
    [{ load: null }, /load is not an object/],
    [{ load: [1, 2] }, /load is not an object/],
    [{ load: '{not json' }, /load is not JSON/],
    [{ load: { cpu_share: 'lots' } }, /load\.cpu_share "lots"/],
    [{ load: { event_loop_lag_ms: -3 } }, /load\.event_loop_lag_ms -3/],
    [{ load: { cpu_share: 0, bound: [1] } }, /load\.bound is not an object/],
    [{ load: { bound: { cpu_share: 'x' } } }, /load\.bound\.cpu_share "x"/],
  ];
  for (const [bad, reason] of cases) {
    const checked = checkRunnerRow(row(bad));
    t.false(checked.ok, JSON.stringify(bad));
    if (!checked.ok) t.regex(checked.problem, reason);
  }
  t.true(checkRunnerRow(row({ slots: 0 })).ok, 'no slot is a full runner, not a malformed one');
});

test('over its bound: each figure against the bound the runner reported; late frames only while sessions are placed on it', (t) => {
  const checked = checkRunnerRow(row({ load: { cpu_share: 0.3, late_frame_share: 0.2, event_loop_lag_ms: 10, bound: { cpu_share: 0.2 } } }));
  if (!checked.ok) return t.fail(checked.problem);
  t.deepEqual(checked.bound, { cpu_share: 0.2, late_frame_share: FLEET.loadBound.late_frame_share, event_loop_lag_ms: FLEET.loadBound.event_loop_lag_ms });
  t.deepEqual(checked.over, ['cpu_share', 'late_frame_share']);
  t.deepEqual(overBound(checked, 1), ['cpu_share', 'late_frame_share']);
  t.deepEqual(overBound(checked, 0), ['cpu_share'], 'an idle runner\'s late frames were its ended sessions\'');
  t.is(loadRatio(checked), 4);
  const calm = checkRunnerRow(row({ load: { cpu_share: 0.45, event_loop_lag_ms: 100 } }));
  if (!calm.ok) return t.fail(calm.problem);
  t.is(loadRatio(calm), 0.5);
  t.deepEqual(calm.over, []);
});

test('SVC_RUNNER_MAX_* and SVC_RUNNER_TEST_BURN_CPU: defaults, values, refusals', (t) => {
  t.deepEqual(runnerLoadBoundFromEnv({}), FLEET.loadBound);
  t.deepEqual(runnerLoadBoundFromEnv({ SVC_RUNNER_MAX_CPU_SHARE: '0.5', SVC_RUNNER_MAX_LATE_FRAME_SHARE: '0.1', SVC_RUNNER_MAX_LOOP_LAG_MS: '250' }), { cpu_share: 0.5, late_frame_share: 0.1, event_loop_lag_ms: 250 });
  // Not a safeguard switched off for this test: these read the setting itself, as an operator
  // who turns the gate's load check off would set it (nothing runs here).
  t.is(runnerLoadBoundFromEnv({ SVC_CAPACITY_LOAD_CHECK: 'off' }).late_frame_share, 1, 'the gate\'s late-frame check off: never over');
  t.is(runnerLoadBoundFromEnv({ SVC_CAPACITY_MAX_LATE_FRAME_SHARE: '0.2' }).late_frame_share, 0.2, 'the gate\'s bound');
  t.is(runnerLoadBoundFromEnv({ SVC_CAPACITY_LOAD_CHECK: 'off', SVC_RUNNER_MAX_LATE_FRAME_SHARE: '0.3' }).late_frame_share, 0.3);
  for (const env of [{ SVC_RUNNER_MAX_CPU_SHARE: '0' }, { SVC_RUNNER_MAX_CPU_SHARE: '1.5' }, { SVC_RUNNER_MAX_LATE_FRAME_SHARE: 'x' }, { SVC_RUNNER_MAX_LOOP_LAG_MS: '0' }, { SVC_RUNNER_MAX_LOOP_LAG_MS: '-1' }]) {
    t.throws(() => runnerLoadBoundFromEnv(env), { instanceOf: ConfigError }, JSON.stringify(env));
  }
  t.is(runnerTestBurnFromEnv({}), 0);
  t.is(runnerTestBurnFromEnv({ SVC_RUNNER_TEST_BURN_CPU: '0.8' }), 0.8);
  t.throws(() => runnerTestBurnFromEnv({ SVC_RUNNER_TEST_BURN_CPU: '2' }), { instanceOf: ConfigError });
});

test('placement counters by runner keep the runners counted most recently, at most RUNNER_COUNTERS_KEPT (ids change with every runner restart)', (t) => {
  t.is(RUNNER_COUNTERS_KEPT, 256);
  const counts: Record<string, number> = {};
  countByRunner(counts, 'a', 3);
  countByRunner(counts, 'b', 3);
  countByRunner(counts, 'a', 3);
  countByRunner(counts, 'c', 3);
  t.deepEqual(counts, { b: 1, a: 2, c: 1 });
  countByRunner(counts, 'd', 3); // b was counted least recently
  t.deepEqual(counts, { a: 2, c: 1, d: 1 });
  for (let i = 0; i < 1000; i++) countByRunner(counts, `runner-${i}`);
  t.is(Object.keys(counts).length, RUNNER_COUNTERS_KEPT);
  t.is(counts['runner-999'], 1);
  t.false('runner-0' in counts);
});
