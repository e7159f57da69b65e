/**
 * SVC_RUNNER_TEST_BURN_CPU (tests and benchmarks only, docs/deployment.md): a runner that burns a
 * share of one core in a thread of its own, so that the load it measures and reports is really
 * high (its process's CPU time, as any busy runner's) without writing anything false anywhere.
 * The thread spins for `share` of every 20 ms and sleeps the rest; `stop()` (the runner calls it
 * on SIGUSR2) ends it.
 */
import { Worker } from 'node:worker_threads';

const SPIN = `
const { workerData } = require('node:worker_threads');
const period = 20;
const sleeper = new Int32Array(new SharedArrayBuffer(4));
for (;;) {
  const start = performance.now();
  while (performance.now() - start < period * workerData.share) {}
  Atomics.wait(sleeper, 0, 0, period * (1 - workerData.share));
}
`;

export function burnCpu(share: number): { stop(): Promise<void> } {
  const worker = new Worker(SPIN, { eval: true, workerData: { share } });
  worker.unref();
  return {
    async stop() {
      await worker.terminate();
    },
  };
}
