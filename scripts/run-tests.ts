/**
 * The test suite's runner (`npm test`): two lanes at once, each ava run in a process group of its
 * own. Heavy files (scripts/test-lanes.ts: chromium, WebRTC, bot sessions, child processes) run one
 * at a time, each in an ava run of its own, so two of them never share the 2 cores and each one's
 * wall time is printed (`[heavy] file ... N s`: a CI run that ran out of time says where it went);
 * light files run beside them in one ava run, one at a time too (they finish long before the heavy
 * lane, so more would only slow the heavy file of the moment).
 * `node --import tsx scripts/run-tests.ts [files...]` runs the given files the same way.
 *
 * A killed run leaves nothing behind, however it ends:
 * - SIGINT, SIGTERM, SIGHUP to the runner: both lanes' process trees get SIGTERM, SIGKILL after
 *   `RUN_TESTS_DEFAULTS.graceMs`;
 * - the runner's parent gone (npm, or the shell npm ran it in, was killed: a CI timeout's SIGKILL):
 *   the runner kills both trees at once;
 * - the runner itself killed -9: ava's main process and every worker carry exit-with-parent.mjs,
 *   which ends what each started and then itself once its parent is gone.
 * Closes with a recap of what failed (each failed ava run's files, `✘` lines and failure details,
 * repeated: a CI log is read from its end), each lane's wall time, `N passed, N failed` (summed
 * over both lanes), and the exit code 1 when a lane failed.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { resolveOptions } from '../core/options.ts';
import { isRunning, signalDescendants } from '../test/support/process-tree.mjs';
import { splitLanes, suiteFiles } from './test-lanes.ts';

export const RUN_TESTS_DEFAULTS = {
  /** Between SIGTERM and SIGKILL when the run is stopped. */
  graceMs: 5_000,
  /** How often the runner checks that its parent is still there. */
  watchIntervalMs: 500,
  /** Files each lane runs at once (ava --concurrency). */
  heavyConcurrency: 1,
  lightConcurrency: 1,
} as const;

const ROOT = join(import.meta.dirname, '..');
/** Core dumps of the run's processes: program name and pid in a known folder. */
const RUN_TESTS_CORE_PATTERN = '/tmp/svc-cores/core.%e.%p';
const AVA = join(ROOT, 'node_modules', 'ava', 'entrypoints', 'cli.mjs');
const EXIT_WITH_PARENT = join(ROOT, 'test', 'support', 'exit-with-parent.mjs');

interface Lane {
  readonly name: 'heavy' | 'light';
  /** The lane's ava run of the moment (the heavy lane starts one per file). */
  child?: ChildProcess;
  readonly startedAt: number;
  passed: number;
  failed: number;
  wallMs?: number;
  code?: number | null;
  /** Settles with the lane's exit code: 0 when every ava run of it passed. */
  done?: Promise<number | null>;
  /** The output of the ava run of the moment from its first `─` rule on (ava's failure details and counts), once it began. */
  tail?: string[];
  /** Each failed ava run's files, `✘` lines and failure details, repeated at the end of the run. */
  readonly failures: string[];
}

/** How long an ava run's output may still be read after it exited. */
const OUTPUT_DRAIN_MS = 2_000;

/** A failed run's details kept for the recap at most (the `✘` lines are always kept). */
const RECAP_MAX_LINES = 150;

const options = resolveOptions(RUN_TESTS_DEFAULTS, {
  ...(process.env.RUN_TESTS_GRACE_MS ? { graceMs: Number(process.env.RUN_TESTS_GRACE_MS) } : {}),
});
const requested = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const lanes = splitLanes(ROOT, requested.length ? requested : suiteFiles(ROOT));
console.log(`run-tests: ${lanes.heavy.length} heavy files (one at a time), ${lanes.light.length} light files beside them`);
if (process.env.RUN_TESTS_VERBOSE) for (const [file, why] of lanes.reasons) console.log(`  heavy ${file} (${why})`);

const runStartedAt = Date.now();
const coreDir = coreDumpDirectory();
const running: Lane[] = [];
let stopping = false;
let stopExitCode = 1;
if (lanes.heavy.length) running.push(startLane('heavy', lanes.heavy, options.heavyConcurrency, true));
if (lanes.light.length) running.push(startLane('light', lanes.light, options.lightConcurrency, false));

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => stop(sig, sig === 'SIGINT' ? 130 : 143));
const watched = ancestorsToWatch();
const watch = setInterval(() => {
  if (watched.some((pid) => !isRunning(pid))) stop('parent gone', 137, true);
}, options.watchIntervalMs);

const codes = await Promise.all(running.map((lane) => lane.done!));
clearInterval(watch);
// Stopped: the runner exits once nothing of the lanes' process groups is left, or when the grace
// timer of stop() has killed what was (a child ignoring SIGTERM).
if (stopping) {
  for (;;) {
    if (running.every((lane) => !groupAlive(lane.child?.pid))) process.exit(stopExitCode);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
const passed = running.reduce((n, l) => n + l.passed, 0);
const failed = running.reduce((n, l) => n + l.failed, 0) + codes.filter((c, i) => c !== 0 && running[i]!.failed === 0).length;
// The recap: a CI log is often read from its end, and a failure happened many minutes earlier.
for (const lane of running) {
  if (lane.failures.length === 0) continue;
  console.log(`run-tests: what failed in the ${lane.name} lane (repeated from above):`);
  for (const line of lane.failures) console.log(`[${lane.name}] ${line}`);
}
for (const lane of running) console.log(`run-tests: ${lane.name} lane ${((lane.wallMs ?? 0) / 1000).toFixed(0)} s, exit ${lane.code}`);
reportCoreDumps();
console.log(`${passed} passed, ${failed} failed`);
process.exit(codes.every((c) => c === 0) ? 0 : 1);

function startLane(name: Lane['name'], files: readonly string[], concurrency: number, filePerRun: boolean): Lane {
  const lane: Lane = { name, startedAt: performance.now(), passed: 0, failed: 0, failures: [] };
  lane.done = (async () => {
    let code: number | null = 0;
    for (const batch of filePerRun ? files.map((f) => [f]) : [files]) {
      if (stopping) break;
      const startedAt = performance.now();
      const exit = await runAva(lane, batch, concurrency);
      if (filePerRun) console.log(`[${name}] file ${batch[0]} ${((performance.now() - startedAt) / 1000).toFixed(1)} s${exit === 0 ? '' : `, exit ${exit}`}`);
      if (exit !== 0) code = exit;
    }
    lane.wallMs = performance.now() - lane.startedAt;
    lane.code = code;
    return code;
  })();
  return lane;
}

/** One ava run of the lane, in a process group of its own; settles with its exit code. */
function runAva(lane: Lane, files: readonly string[], concurrency: number): Promise<number | null> {
  // Core dumps on (the kernel writes `core` into the crashing process's directory, the
  // repository): a SIGSEGV of chromium or of a worker is then named after the run (scripts/core-backtrace.sh).
  const child = spawn('/bin/sh', ['-c', 'ulimit -c unlimited 2>/dev/null; exec "$0" "$@"', process.execPath, '--import', EXIT_WITH_PARENT, AVA, `--concurrency=${concurrency}`, ...files], {
    cwd: ROOT,
    detached: true, // a process group of its own, ended as one
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SVC_TEST_LANE: lane.name },
  });
  lane.child = child;
  lane.tail = undefined;
  const crosses: string[] = [];
  for (const stream of [child.stdout!, child.stderr!]) {
    let rest = '';
    stream.on('data', (d: Buffer) => {
      const lines = (rest + d.toString()).split('\n');
      rest = lines.pop()!;
      for (const line of lines) keep(lane, crosses, print(lane, line));
    });
    stream.on('end', () => rest && keep(lane, crosses, print(lane, rest)));
  }
  // Settled at the exit, once the output read so far is in (the recap needs ava's last lines), but
  // not waiting for the pipes to close: a process ava left behind holding them would hold the lane.
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      let settled = false;
      const settle = () => {
        if (settled) return;
        settled = true;
        const exit = signal ? null : code;
        if (exit !== 0) {
          lane.failures.push(`files: ${files.length === 1 ? files[0] : `${files.length} files`}, exit ${exit ?? signal}`, ...crosses);
          lane.failures.push(...(lane.tail ?? []));
        }
        resolve(exit);
      };
      const closed = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        settle();
      }, OUTPUT_DRAIN_MS);
      child.once('close', () => {
        clearTimeout(closed);
        settle();
      });
    });
  });
}

/**
 * Keeps what the recap repeats: every `✘` line, and the output from ava's first `─` rule on (it
 * comes after the last test: the failures' details, then the counts), at most RECAP_MAX_LINES.
 */
function keep(lane: Lane, crosses: string[], line: string): void {
  if (line.includes('✘')) crosses.push(line);
  if (!lane.tail && /^\s*─\s*$/.test(line)) lane.tail = [];
  if (lane.tail && lane.tail.length < RECAP_MAX_LINES) lane.tail.push(line);
}

/** A line of a lane's output, prefixed with the lane; its ava summary counted. */
function print(lane: Lane, line: string): string {
  // Passes are counted test by test: ava's counts leave out `N tests passed` when a test failed.
  if (/^\s*✔ /.test(line)) lane.passed += 1;
  const summary = /^\s*(\d+) (?:tests?|known failures?) (failed)\s*$/.exec(line) ?? /^\s*(\d+) (uncaught exceptions?|unhandled rejections?|tests? timed out)\s*$/.exec(line);
  if (summary) lane.failed += Number(summary[1]);
  console.log(`[${lane.name}] ${line}`);
  return line;
}

/** Core dumps written during the run: each one's program, signal and crashing frames, then removed (kept with SVC_KEEP_CORES=1). */
function reportCoreDumps(): void {
  // A run inside the suite (test/support/run-tests-recap.test.ts) leaves the dumps of the outer
  // run's other processes to the outer run.
  if (process.env.RUN_TESTS_CORE_REPORT === 'off') return;
  if (!coreDir || !existsSync(coreDir)) return;
  const cores = readdirSync(coreDir)
    .filter((f) => f.startsWith('core'))
    .map((f) => join(coreDir, f))
    .filter((f) => statSync(f).isFile() && statSync(f).mtimeMs >= runStartedAt);
  if (cores.length === 0) return;
  console.log(`run-tests: ${cores.length} core dump(s) written during the run:`);
  spawnSync('bash', [join(ROOT, 'scripts', 'core-backtrace.sh'), ...cores], { stdio: 'inherit', timeout: 120_000 });
  if (!process.env.SVC_KEEP_CORES) for (const core of cores) rmSync(core, { force: true });
}

/**
 * Where the kernel writes core dumps. Its default pattern `core` names a file in the crashing
 * process's directory, the repository, where the `core/` folder takes that name: no dump was ever
 * written. As root the runner then sets `RUN_TESTS_CORE_PATTERN` (a sysctl of the machine; a
 * pattern that pipes to a crash handler is left alone and its dumps are not reported here).
 */
function coreDumpDirectory(): string | undefined {
  const PATTERN_FILE = '/proc/sys/kernel/core_pattern';
  let pattern = '';
  try {
    pattern = readFileSync(PATTERN_FILE, 'utf8').trim();
  } catch {
    return undefined;
  }
  if (pattern === 'core' || pattern === 'core.%p') {
    try {
      mkdirSync(dirname(RUN_TESTS_CORE_PATTERN), { recursive: true, mode: 0o1777 });
      writeFileSync(PATTERN_FILE, RUN_TESTS_CORE_PATTERN);
      pattern = RUN_TESTS_CORE_PATTERN;
    } catch {
      console.log(`run-tests: core dumps would land in ${ROOT}/core, a folder: set ${PATTERN_FILE} to ${RUN_TESTS_CORE_PATTERN} (root) to have them`);
      return undefined;
    }
  }
  if (pattern.startsWith('|')) return undefined;
  if (!pattern.startsWith('/')) return ROOT;
  // The folder may be gone while the kernel still names it (a cleaned /tmp): the kernel then
  // writes nothing, and the report would find no folder.
  try {
    mkdirSync(dirname(pattern), { recursive: true, mode: 0o1777 });
  } catch {
    return undefined;
  }
  return dirname(pattern);
}

/** Stops both lanes' trees: SIGTERM then SIGKILL after the grace, or SIGKILL at once. */
function stop(why: string, exitCode: number, now = false): void {
  if (stopping) return;
  stopping = true;
  stopExitCode = exitCode;
  console.error(`run-tests: stopping (${why}): ending both lanes and everything they started`);
  const kill = (sig: NodeJS.Signals) => {
    for (const lane of running) {
      if (!lane.child?.pid) continue;
      signalDescendants(lane.child.pid, sig);
      try {
        process.kill(-lane.child.pid, sig);
      } catch {
        // ended
      }
    }
  };
  if (now) {
    kill('SIGKILL');
    process.exit(exitCode);
  }
  kill('SIGTERM');
  // Not unref'd: the runner stays until the grace ends, however soon the lanes' ava runs exit.
  setTimeout(() => {
    kill('SIGKILL');
    process.exit(exitCode);
  }, options.graceMs);
}

/** Whether a process of the group `pgid` leads still runs. */
function groupAlive(pgid: number | undefined): boolean {
  if (!pgid) return false;
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The runner's parent, and when that is the shell npm runs scripts in, npm too: npm killed -9
 * leaves its shell (and so this runner) running, which is what a CI timeout does.
 */
function ancestorsToWatch(): number[] {
  const pids = [process.ppid];
  const comm = (pid: number) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      return '';
    }
  };
  const parentOf = (pid: number) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return 0;
    }
  };
  if (['sh', 'bash', 'dash'].includes(comm(process.ppid))) {
    const npm = parentOf(process.ppid);
    if (npm > 1) pids.push(npm);
  }
  return pids;
}
