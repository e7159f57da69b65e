/**
 * Builds dist/ once for all test files of a run (and not again while no source changed): test
 * files run in parallel processes, so the build is guarded by a lock directory and stamped with
 * the newest modification time of what it is built from.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { build, DIST, ROOT } from '../../scripts/build.ts';

export { ROOT, DIST };

const INPUTS = ['core', 'processors', 'transports', 'agent', 'plugins', 'clients', 'protocol', 'testing', 'scripts', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];
const LOCK = join(ROOT, '.dist.lock');
const STAMP = join(DIST, '.build-stamp');

function newestMtime(path: string): number {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let newest = stat.mtimeMs;
  for (const name of readdirSync(path)) if (name !== 'node_modules' && name !== 'python') newest = Math.max(newest, newestMtime(join(path, name)));
  return newest;
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

export function buildOnce(): void {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch {
      // A lock older than the longest build is left over from a killed run.
      if (existsSync(LOCK) && Date.now() - statSync(LOCK).mtimeMs > 120_000) rmSync(LOCK, { recursive: true, force: true });
      if (Date.now() > deadline) throw new Error('timed out waiting for another test process to build dist/');
      sleepSync(200);
    }
  }
  try {
    const stamp = String(Math.max(...INPUTS.map((p) => newestMtime(join(ROOT, p)))));
    if (existsSync(STAMP) && readFileSync(STAMP, 'utf8') === stamp) return;
    build({ quiet: true });
    writeFileSync(STAMP, stamp);
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}
