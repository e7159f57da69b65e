/**
 * Entry of a face render worker thread. Node 20 worker threads do not inherit tsx's loader
 * hooks (see plugins/local/espeak-worker.mjs), so this plain-JavaScript entry registers tsx in
 * the worker when the real worker module is TypeScript, then loads it.
 */
import { workerData } from 'node:worker_threads';

const entry = workerData.entry;
if (entry.endsWith('.ts')) {
  const { register } = await import('tsx/esm/api');
  register();
}
await import(entry);
