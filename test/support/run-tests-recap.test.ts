/**
 * A CI log is read from its end: the runner (scripts/run-tests.ts) repeats what failed (the file,
 * the failed test's title and ava's details) after the last file's output, in each lane, so a
 * failure many minutes into the heavy lane is named in the log's last lines.
 */
import test from 'ava';
import { spawn } from 'node:child_process';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');
const HEAVY = 'test/support/fixtures/failing-heavy.fixture.ts';
const LIGHT = 'test/support/fixtures/failing-light.fixture.ts';

test('a failed test is repeated at the end of the run: its file, its title and its details, in each lane', async (t) => {
  t.timeout(120_000);
  const run = spawn(process.execPath, ['--import', 'tsx', 'scripts/run-tests.ts', HEAVY, LIGHT], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RUN_TESTS_CORE_REPORT: 'off' } });
  let output = '';
  run.stdout.on('data', (d: Buffer) => (output += d.toString()));
  run.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const code = await new Promise<number | null>((resolve) => run.once('close', resolve));
  t.is(code, 1, output);
  const lines = output.split('\n');
  const recapAt = (lane: string): number => lines.indexOf(`run-tests: what failed in the ${lane} lane (repeated from above):`);
  const countsAt = lines.findIndex((l) => l.startsWith('run-tests: heavy lane'));
  t.true(recapAt('heavy') > 0 && recapAt('light') > 0 && countsAt > recapAt('heavy') && countsAt > recapAt('light'), output);
  // Both recaps come after both files' own output (each file's counts appear first there).
  const firstCounts = (lane: string): number => lines.indexOf(`[${lane}]   1 test failed`);
  t.true(firstCounts('heavy') > 0 && firstCounts('light') > 0, output);
  t.true(Math.max(firstCounts('heavy'), firstCounts('light')) < Math.min(recapAt('heavy'), recapAt('light')), output);

  const recap = (lane: string): string => {
    const from = recapAt(lane) + 1;
    const to = lines.findIndex((l, i) => i >= from && l.startsWith('run-tests: '));
    return lines.slice(from, to).join('\n');
  };
  const heavy = recap('heavy');
  t.regex(heavy, new RegExp(`files: ${HEAVY}, exit 1`));
  t.regex(heavy, /✘ \[fail\]: heavy fixture: the child exits 0/);
  t.regex(heavy, /the child exited 3/);
  t.regex(heavy, /failing-heavy\.fixture\.ts:\d+/);
  t.notRegex(heavy, /a test that passes/);
  const light = recap('light');
  t.regex(light, /files: test\/support\/fixtures\/failing-light\.fixture\.ts, exit 1/);
  t.regex(light, /✘ \[fail\]: light fixture: the greeting/);
  t.regex(light, /bonjour/);
  t.notRegex(light, /heavy fixture/);
  t.regex(output, /^2 passed, 2 failed$/m);
});
