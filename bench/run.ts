/**
 * Benchmark runner: `npm run bench` runs every benchmark, `npm run bench -- pipeline avatar`
 * runs the named ones. Each benchmark module exports `run()`, prints a table and one JSON line
 * per figure set (`{"bench":"<name>", ...}`).
 */
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const available = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts' && !f.startsWith('_'))
  .map((f) => f.replace(/\.ts$/, ''))
  .sort();

const requested = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const unknown = requested.filter((r) => !available.includes(r));
if (unknown.length) {
  console.error(`unknown benchmark(s): ${unknown.join(', ')}; available: ${available.join(', ')}`);
  process.exit(2);
}

for (const name of requested.length ? requested : available) {
  const mod = (await import(pathToFileURL(join(here, `${name}.ts`)).href)) as { run?: () => Promise<void> | void };
  if (typeof mod.run !== 'function') {
    console.error(`bench/${name}.ts does not export run()`);
    process.exitCode = 1;
    continue;
  }
  console.log(`\n== bench: ${name} ==`);
  await mod.run();
}
process.exit(process.exitCode ?? 0);
