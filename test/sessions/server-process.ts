/**
 * `server/main.ts` as a child process (what `npm start` runs), in a process group of its own so
 * the whole group can be killed. For tests and benchmarks that need real server processes.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { seedPgliteDir } from '../support/pglite-template.ts';
import { spawnEntryPoint } from '../support/process-group.ts';

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

/**
 * On the embedded database (`DATABASE_URL: ''` with an `SVC_DATA_DIR` holding none yet), the
 * folder gets an empty database copied from a template (test/support/pglite-template.ts), not
 * initdb's seconds. The first `npm start` itself is test/server/main.test.ts's, which spawns it directly.
 */
export async function startServerProcess(env: Record<string, string>): Promise<ServerProcess> {
  const pgliteDir = env.SVC_DATA_DIR ? join(env.SVC_DATA_DIR, 'pglite') : undefined;
  if (env.DATABASE_URL === '' && pgliteDir && !existsSync(pgliteDir)) await seedPgliteDir(pgliteDir);
  const listening = (output: string) => /svc server listening on (http:\/\/\S+)/.exec(output)?.[1];
  // The first-start key lines follow the listening lines: wait for the end of the banner.
  const { process: p, ready } = spawnEntryPoint(
    'server/main.ts',
    { PORT: '0', HOST: '127.0.0.1', ...env },
    (output) => listening(output) !== undefined && /\n\s*$/.test(output) && (output.includes('Try: curl') || !output.includes('First start')),
    'server',
  );
  await ready;
  const url = listening(p.output)!;
  return {
    child: p.child,
    url,
    get output() {
      return p.output;
    },
    get firstKey() {
      return /^\s+(svc_\S+)\s*$/m.exec(p.output)?.[1];
    },
    exited: p.exited,
    kill: (signal) => p.kill(signal),
  };
}
