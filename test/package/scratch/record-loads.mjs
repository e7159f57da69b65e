// Preloaded with --import: records every module the process loads (ESM through a resolve hook
// that runs on the loader thread, CommonJS from require.cache at exit) into $LOADS_FILE.
import { register } from 'node:module';
import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';

register(new URL('./record-hooks.mjs', import.meta.url), { data: { file: process.env.LOADS_FILE } });
const require = createRequire(import.meta.url);
process.on('exit', () => {
  appendFileSync(process.env.LOADS_FILE, Object.keys(require.cache).map((p) => `file://${p}\n`).join(''));
});
