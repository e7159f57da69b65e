/**
 * A test run killed from outside, as a CI timeout kills it, leaves nothing running: the runner
 * (scripts/run-tests.ts) runs a fixture that starts a child process ignoring SIGTERM and chromium
 * (test/support/fixtures/lingering-run.fixture.ts); once both run, the run is killed, and every
 * process that was in its tree (ava, its worker, the child, chromium's processes) must be gone.
 * Three ways: the runner killed -9 (nothing of it runs any more), the runner sent SIGTERM, and the
 * npm that ran it killed -9 while its shell lives on.
 */
import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '../../testing/until.ts';
import { descendantsOf, isRunning, signalDescendants, type ProcessEntry } from './process-tree.mjs';

const ROOT = join(import.meta.dirname, '..', '..');
const FIXTURE = 'test/support/fixtures/lingering-run.fixture.ts';
const RUNNER = `${JSON.stringify(process.execPath)} --import tsx scripts/run-tests.ts ${FIXTURE}`;

interface Started {
  readonly top: ChildProcess;
  readonly tree: ProcessEntry[];
}

/** Starts `argv` in a group of its own and waits until the fixture runs chromium. */
async function startRun(t: { teardown(fn: () => void): void; log(...values: unknown[]): void }, argv: string[]): Promise<Started> {
  const dir = mkdtempSync(join(tmpdir(), 'killed-run-'));
  const ready = join(dir, 'ready.json');
  const top = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LINGERING_RUN_READY: ready, RUN_TESTS_GRACE_MS: '2000' } });
  let output = '';
  let tree: ProcessEntry[] = [];
  top.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  top.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  t.teardown(() => {
    // Whatever the outcome, nothing of this run survives the test (what it left is re-parented
    // and no longer below `top`: its recorded pids and the groups they lead are killed too).
    signalDescendants(top.pid!, 'SIGKILL');
    for (const p of tree.filter((entry) => isRunning(entry.pid))) {
      try {
        process.kill(p.pgid === p.pid ? -p.pid : p.pid, 'SIGKILL');
      } catch {
        // ended
      }
    }
    try {
      process.kill(-top.pid!, 'SIGKILL');
    } catch {
      // ended
    }
    rmSync(dir, { recursive: true, force: true });
  });
  const pids = await until(() => existsSync(ready) && (JSON.parse(readFileSync(ready, 'utf8')) as { worker: number; child: number; profile: string }), { timeoutMs: 90_000, what: 'the fixture to run chromium' }).catch((error: Error) => {
    throw new Error(`${error.message}; output:\n${output}`);
  });
  // Chromium killed with its run cannot remove its profile folder: the test does.
  t.teardown(() => rmSync(pids.profile, { recursive: true, force: true }));
  tree = descendantsOf(top.pid!);
  t.log(`run tree: ${tree.map((p) => `${p.pid} ${p.comm}`).join(', ')}`);
  if (!tree.some((p) => p.pid === pids.worker) || !tree.some((p) => p.pid === pids.child) || !tree.some((p) => /chrom/.test(p.comm))) {
    throw new Error(`the run's tree lacks the worker ${pids.worker}, the child ${pids.child} or chromium: ${JSON.stringify(tree)}`);
  }
  return { top, tree };
}

/** Every process that was in the run's tree has ended (a bound for a loaded machine, not a timing goal). */
async function nothingLeft(tree: readonly ProcessEntry[]): Promise<string[]> {
  await until(() => tree.every((p) => !isRunning(p.pid)), { timeoutMs: 30_000, intervalMs: 100, what: 'every process of the run to end' }).catch(() => undefined);
  return tree.filter((p) => isRunning(p.pid)).map((p) => `${p.pid} ${p.comm}`);
}

test.serial('the runner killed -9: ava, its worker, a child ignoring SIGTERM and chromium all end', async (t) => {
  t.timeout(180_000);
  const { top, tree } = await startRun(t, ['sh', '-c', `exec ${RUNNER}`]);
  top.kill('SIGKILL');
  t.deepEqual(await nothingLeft(tree), [], 'processes of the killed run still running');
});

test.serial('the runner sent SIGTERM: it ends both lanes and everything they started', async (t) => {
  t.timeout(180_000);
  const { top, tree } = await startRun(t, ['sh', '-c', `exec ${RUNNER}`]);
  top.kill('SIGTERM');
  t.deepEqual(await nothingLeft(tree), [], 'processes of the stopped run still running');
  // The runner ends too (it exits once its lanes' groups are empty; a bound, not a timing goal).
  const ended = await until(() => top.exitCode !== null || top.signalCode !== null, { timeoutMs: 15_000, what: 'the runner to exit' }).then(() => true, () => false);
  t.true(ended, 'the runner still runs after SIGTERM');
});

test.serial('npm killed -9 while its shell lives on: the runner sees npm gone and ends the run', async (t) => {
  t.timeout(180_000);
  // A stand-in for npm: a node process running the script in a shell (`; :` keeps the shell).
  const npm = `require('node:child_process').spawn('sh', ['-c', ${JSON.stringify(`${RUNNER}; :`)}], { stdio: 'inherit' }); setInterval(() => {}, 1000)`;
  const { top, tree } = await startRun(t, [process.execPath, '-e', npm]);
  const shell = tree.find((p) => p.comm === 'sh')!;
  top.kill('SIGKILL');
  const left = await nothingLeft(tree.filter((p) => p.pid !== shell.pid));
  t.deepEqual(left, [], 'processes of the run still running after npm was killed');
});
