/**
 * Benchmark runner: `npm run bench` runs every benchmark, `npm run bench -- pipeline avatar`
 * runs the named ones. Each benchmark module exports `run()`, prints a table and one JSON line
 * per figure set (`{"bench":"<name>", ...}`).
 *
 * Each benchmark runs in a process of its own: what one loads (the server, PGlite, the vendor
 * SDKs) enlarges the heap that every garbage collection of the next one must walk, which showed
 * as frame lateness in the avatar bench.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const available = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts' && f !== 'table.ts' && !f.startsWith('_'))
  .map((f) => f.replace(/\.ts$/, ''))
  .sort();

const args = process.argv.slice(2);
const childIndex = args.indexOf('--child');
if (childIndex >= 0) {
  const name = args[childIndex + 1]!;
  const mod = (await import(pathToFileURL(join(here, `${name}.ts`)).href)) as { run?: () => Promise<unknown> | unknown };
  if (typeof mod.run !== 'function') {
    console.error(`bench/${name}.ts does not export run()`);
    process.exit(1);
  }
  await mod.run();
  process.exit(process.exitCode ?? 0);
}

const requested = args.filter((a) => !a.startsWith('-'));
const unknown = requested.filter((r) => !available.includes(r));
if (unknown.length) {
  console.error(`unknown benchmark(s): ${unknown.join(', ')}; available: ${available.join(', ')}`);
  process.exit(2);
}

let failed = 0;
for (const name of requested.length ? requested : available) {
  console.log(`\n== bench: ${name} ==`);
  const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', name], { stdio: 'inherit' });
  if (child.status !== 0) {
    console.error(`bench ${name} failed (exit ${child.status ?? child.signal})`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
