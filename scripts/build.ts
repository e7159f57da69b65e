/**
 * Builds the installable package into dist/: compiled JavaScript and declaration files for every
 * public entry point (tsconfig.build.json), plus the files the compiled code reads at run time
 * that are not TypeScript (worker entries in plain JavaScript, the face assets, hand-written
 * declaration files).
 *
 *   npm run build          (also run by `npm pack` through "prepack")
 *
 * `rewriteRelativeImportExtensions` turns `import './x.ts'` into `import './x.js'`, but not a
 * worker address written as `new URL('./x.ts', import.meta.url)`; those are rewritten here when
 * the compiled `x.js` exists beside it, so a worker starts from the package without tsx.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, extname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const DIST = join(ROOT, 'dist');

/** Source folders compiled into dist/ (what tsconfig.build.json includes, and what they import). */
const SOURCE_DIRS = ['core', 'processors', 'transports', 'agent', 'plugins', 'clients', 'protocol', 'testing'];
/** Non-TypeScript files the compiled code needs beside it. */
const RUNTIME_FILE = (path: string) => /\.(mjs|cjs|png|jpe?g|json|bin|wasm)$/.test(path) || path.endsWith('.d.ts') || path.endsWith('room-client.js');
const SKIP_DIRS = new Set(['node_modules', 'python', 'test', 'dist']);

function walk(dir: string, out: string[] = []): string[] {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      if (!SKIP_DIRS.has(name)) walk(path, out);
    } else out.push(path);
  }
  return out;
}

export function build(options: { quiet?: boolean } = {}): void {
  rmSync(DIST, { recursive: true, force: true });
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const result = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json')], { cwd: ROOT, encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`tsc -p tsconfig.build.json failed:\n${result.stdout}${result.stderr}`);

  let copied = 0;
  for (const dir of SOURCE_DIRS) {
    for (const path of walk(join(ROOT, dir))) {
      if (!RUNTIME_FILE(path)) continue;
      const rel = relative(ROOT, path);
      if (rel.startsWith('clients/') && rel !== 'clients/index.ts') continue; // the browser and Python clients ship apart
      cpSync(path, join(DIST, rel), { force: true });
      copied++;
    }
  }

  let rewritten = 0;
  for (const path of walk(DIST)) {
    if (extname(path) !== '.js') continue;
    const text = readFileSync(path, 'utf8');
    const next = text.replace(/new URL\((['"])(\.{1,2}\/[^'"]+)\.ts\1, import\.meta\.url\)/g, (whole, quote: string, stem: string) =>
      existsSync(join(dirname(path), `${stem}.js`)) ? `new URL(${quote}${stem}.js${quote}, import.meta.url)` : whole,
    );
    if (next !== text) {
      writeFileSync(path, next);
      rewritten++;
    }
  }
  if (!options.quiet) console.log(`dist/ built: ${copied} runtime files copied, ${rewritten} worker addresses rewritten`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) build();
