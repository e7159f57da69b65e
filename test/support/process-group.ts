/**
 * A TypeScript entry point of this repository (`server/main.ts`, `server/worker.ts`) as a child
 * process in a process group of its own, so that a test can signal, or kill -9, the whole group
 * and nothing it started survives. Output is collected; `ready` resolves once `isReady(output)`
 * holds and rejects if the process exits first. A child whose test process dies without stopping
 * it (a timeout, a crash) kills its own group within half a second.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');
/** Makes the child kill its process group once this process is gone (exit-with-parent.mjs). */
const EXIT_WITH_PARENT = new URL('./exit-with-parent.mjs', import.meta.url).href;

export interface GroupProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** stdout and stderr so far. */
  readonly output: string;
  readonly exited: Promise<number | null>;
  /** Signals the whole process group (SIGKILL: nothing survives). */
  kill(signal: NodeJS.Signals): void;
}

export function spawnEntryPoint(
  entry: string,
  env: Record<string, string>,
  isReady: (output: string) => boolean,
  what: string,
  /** A command that runs the rest (e.g. `ip netns exec <ns>`): the child then is that command's exec. */
  wrap: readonly string[] = [],
): { readonly process: GroupProcess; readonly ready: Promise<void> } {
  const argv = [process.execPath, '--import', EXIT_WITH_PARENT, '--import', 'tsx', entry];
  const [command, ...args] = [...wrap, ...argv] as [string, ...string[]];
  const child = spawn(command, args, {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const handle: GroupProcess = {
    child,
    pid: child.pid!,
    get output() {
      return output;
    },
    exited,
    kill(signal) {
      try {
        process.kill(-child.pid!, signal);
      } catch {
        // already gone
      }
    },
  };
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      output += d.toString();
      if (isReady(output)) resolve();
    });
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    void exited.then((code) => reject(new Error(`${what} exited (${code}) before it was ready:\n${output}`)));
  });
  return { process: handle, ready };
}
