/**
 * A process a test started through spawnEntryPoint does not outlive the test process: killed
 * without a chance to clean up (kill -9, as a timeout does), the test process leaves an orphan
 * that stops itself and its group.
 */
import test from 'ava';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { until } from '../../testing/until.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('an entry point whose test process is killed -9 stops itself', async (t) => {
  const parent = spawn(process.execPath, ['--import', 'tsx', 'test/support/fixtures/orphaning-parent.ts'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => { try { parent.kill('SIGKILL'); } catch { /* gone */ } });
  let out = '';
  parent.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const childPid = await until(() => Number(/child (\d+)/.exec(out)?.[1]) || undefined, { timeoutMs: 30_000, what: 'the child to start' });
  t.teardown(() => { try { process.kill(-childPid, 'SIGKILL'); } catch { /* gone */ } });
  t.true(alive(childPid));
  parent.kill('SIGKILL');
  await until(() => !alive(childPid), { timeoutMs: 10_000, what: 'the orphaned child to stop' });
  t.false(alive(childPid));
});
