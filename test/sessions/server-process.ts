/**
 * `server/main.ts` as a child process (what `npm start` runs), in a process group of its own so
 * the whole group can be killed. For tests and benchmarks that need real server processes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export interface ServerProcess {
  readonly child: ChildProcess;
  readonly url: string;
  /** stdout and stderr so far. */
  readonly output: string;
  /** The API key printed on a first start (empty database), if any. */
  readonly firstKey: string | undefined;
  readonly exited: Promise<number | null>;
  /** Signals the whole process group (SIGKILL: nothing survives). */
  kill(signal: NodeJS.Signals): void;
}

const ROOT = join(import.meta.dirname, '..', '..');

export function startServerProcess(env: Record<string, string>): Promise<ServerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let url = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const handle = (): ServerProcess => ({
    child,
    url,
    get output() {
      return output;
    },
    get firstKey() {
      return /^\s+(svc_\S+)\s*$/m.exec(output)?.[1];
    },
    exited,
    kill(signal) {
      try {
        process.kill(-child.pid!, signal);
      } catch {
        // already gone
      }
    },
  });
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      output += d.toString();
      const m = /svc server listening on (http:\/\/\S+)/.exec(output);
      // The first-start key lines follow the listening lines: wait for the end of the banner.
      if (m && !url && /\n\s*$/.test(output) && (output.includes('Try: curl') || !output.includes('First start'))) {
        url = m[1]!;
        resolve(handle());
      }
    });
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    void exited.then((code) => reject(new Error(`server exited (${code}) before listening:\n${output}`)));
  });
}
