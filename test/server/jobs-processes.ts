/**
 * For the durable-jobs tests: `server/worker.ts` (what `npm run worker` runs) as a child process
 * in a process group of its own. Its tests wait with testing/until.ts, bounded generously (a loaded
 * machine is slow, never wrong). Server processes come from test/sessions/server-process.ts.
 */
import type { ChildProcess } from 'node:child_process';
import { spawnEntryPoint } from '../support/process-group.ts';

export interface WorkerProcess {
  readonly child: ChildProcess;
  /** The `runner_id` prefix of its jobs (`host:pid:`). */
  readonly pid: number;
  readonly output: string;
  readonly exited: Promise<number | null>;
  /** Signals the whole process group. */
  kill(signal: NodeJS.Signals): void;
}

/** Starts a worker process and resolves once it runs (its start line printed). */
export async function startWorkerProcess(env: Record<string, string>): Promise<WorkerProcess> {
  const { process: worker, ready } = spawnEntryPoint('server/worker.ts', env, (output) => /svc worker \S+ running generation jobs/.test(output), 'worker');
  await ready;
  return worker;
}
