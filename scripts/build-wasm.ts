/**
 * Compiles the hand-written WebAssembly kernels (`*.wat` under plugins/) into the `.wasm` files
 * beside them, which are checked in: the service and the package load the binary and need no
 * WebAssembly toolchain. wabt is a development dependency only; test/face/warp-kernel.test.ts
 * recompiles each source and fails when a checked-in binary is stale.
 *
 *   npm run build:wasm
 */
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import wabtInit from 'wabt';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Every kernel source in the repository's plugins. */
export function watSources(dir = join(ROOT, 'plugins')): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...watSources(path));
    else if (name.endsWith('.wat')) out.push(path);
  }
  return out.sort();
}

/** The binary of one kernel source (SIMD and bulk memory enabled, no debug names). */
export async function compileWat(path: string): Promise<Uint8Array> {
  const wabt = await wabtInit();
  const module = wabt.parseWat(path, readFileSync(path, 'utf8'), { simd: true, bulk_memory: true });
  try {
    module.validate();
    return module.toBinary({ log: false, write_debug_names: false }).buffer;
  } finally {
    module.destroy();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const path of watSources()) {
    const target = path.replace(/\.wat$/, '.wasm');
    writeFileSync(target, await compileWat(path));
    console.log(`${path.slice(ROOT.length)} -> ${target.slice(ROOT.length)}`);
  }
}
