/**
 * The public API report: per entry point of the package, every exported name with its declared
 * signature, read from the declaration files the build emits (dist/**\/*.d.ts). Checked in under
 * api-reports/; test/package/api-report.test.ts fails with a diff when the surface changed and
 * the report was not regenerated, so a change of the public API is always a deliberate one.
 *
 *   npm run api-report        (builds dist/, then rewrites api-reports/)
 *
 * What counts: exported names and their declarations, with comments left out (documentation is
 * not the surface) and private class members left out (not callable from outside).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, DIST, ROOT } from './build.ts';

export const REPORTS_DIR = join(ROOT, 'api-reports');

interface Manifest {
  name: string;
  exports: Record<string, string | { types: string; default: string }>;
}

/** Entry points of the exports map: `core`, `plugins/local`, ... with their .d.ts. */
export function entryPoints(root = ROOT): Array<{ subpath: string; types: string }> {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Manifest;
  return Object.entries(manifest.exports)
    .filter(([, target]) => typeof target !== 'string')
    .map(([key, target]) => ({ subpath: key.slice(2), types: join(root, (target as { types: string }).types) }));
}

/** Top-level statements of a declaration file, comments removed. */
function statements(text: string): string[] {
  const noComments = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  const out: string[] = [];
  for (const line of noComments.split('\n')) {
    if (line.trim() === '') continue;
    // Emitted declarations start each statement at column 0; anything else continues one.
    if (out.length > 0 && /^[\s})\]|&]/.test(line)) out[out.length - 1] += `\n${line}`;
    else out.push(line);
  }
  return out.map((s) => s.replace(/\n\s+private [^\n]*;/g, '').replace(/\n\s+#private;/g, ''));
}

type Exports = Map<string, string[]>;

const cache = new Map<string, Exports>();

function targetFile(from: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  const base = resolve(dirname(from), specifier);
  for (const candidate of [base.replace(/\.(js|ts)$/, '.d.ts'), base.replace(/\.mjs$/, '.d.mts'), `${base}.d.ts`, join(base, 'index.d.ts')]) {
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

function parseNames(list: string): Array<{ name: string; as: string }> {
  return list
    .split(',')
    .map((s) => s.trim().replace(/^type\s+/, ''))
    .filter(Boolean)
    .map((s) => {
      const [name, as] = s.split(/\s+as\s+/);
      return { name: name!.trim(), as: (as ?? name!).trim() };
    });
}

/** Exported name -> declaration texts (several for overloads and merged declarations). */
function exportsOf(file: string): Exports {
  const known = cache.get(file);
  if (known) return known;
  const result: Exports = new Map();
  cache.set(file, result);
  const local = new Map<string, string[]>();
  const imported = new Map<string, { file: string; name: string }>();
  const add = (map: Map<string, string[]>, name: string, decl: string) => map.set(name, [...(map.get(name) ?? []), decl]);
  const stmts = statements(readFileSync(file, 'utf8'));
  for (const s of stmts) {
    const decl = /^(export\s+)?(?:declare\s+)?(?:default\s+)?(?:abstract\s+)?(?:async\s+)?(function|class|interface|type|const|let|var|enum|namespace)\s+([\w$]+)/.exec(s);
    if (decl) {
      add(local, decl[3]!, s.replace(/^export\s+/, '').replace(/^declare\s+/, ''));
      continue;
    }
    const imp = /^import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+['"]([^'"]+)['"]/.exec(s);
    if (imp) {
      const from = targetFile(file, imp[2]!);
      if (from) for (const { name, as } of parseNames(imp[1]!)) imported.set(as, { file: from, name });
    }
  }
  const resolveLocal = (name: string): string[] => {
    const own = local.get(name);
    if (own) return own;
    const imp = imported.get(name);
    if (imp) return exportsOf(imp.file).get(imp.name) ?? [`/* unresolved: ${name} */`];
    return [`/* external: ${name} */`];
  };
  for (const s of stmts) {
    const star = /^export\s+\*\s+from\s+['"]([^'"]+)['"]/.exec(s);
    if (star) {
      const from = targetFile(file, star[1]!);
      if (!from) throw new Error(`${file}: cannot follow export * from '${star[1]}'`);
      for (const [name, decls] of exportsOf(from)) if (name !== 'default' && !result.has(name)) result.set(name, decls);
      continue;
    }
    const named = /^export\s+(?:type\s+)?\{([^}]*)\}(?:\s+from\s+['"]([^'"]+)['"])?/.exec(s);
    if (named) {
      const from = named[2] ? targetFile(file, named[2]) : undefined;
      for (const { name, as } of parseNames(named[1]!)) {
        if (from) result.set(as, exportsOf(from).get(name) ?? [`/* unresolved: ${name} */`]);
        else if (named[2]) result.set(as, [`/* from '${named[2]}': ${name} */`]);
        else result.set(as, resolveLocal(name));
      }
      continue;
    }
    const def = /^export\s+default\s+([\w$]+)\s*;/.exec(s);
    if (def) {
      result.set('default', [`default = ${def[1]}`]);
      continue;
    }
    const decl = /^export\s+(?:declare\s+)?(?:default\s+)?(?:abstract\s+)?(?:async\s+)?(?:function|class|interface|type|const|let|var|enum|namespace)\s+([\w$]+)/.exec(s);
    if (decl && !result.has(decl[1]!)) result.set(decl[1]!, local.get(decl[1]!)!);
  }
  return result;
}

/** The report text of one entry point. */
export function apiReport(packageName: string, subpath: string, typesFile: string): string {
  cache.clear();
  const exports = exportsOf(typesFile);
  const names = [...exports.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const lines = [
    `# API report: ${packageName}/${subpath}`,
    '',
    `Generated by \`npm run api-report\` from the emitted declaration files. Do not edit: a test compares it with the build.`,
    `${names.length} exported names.`,
    '',
  ];
  for (const name of names) {
    lines.push(`## ${name}`, '', '```ts', ...exports.get(name)!, '```', '');
  }
  return lines.join('\n');
}

export function reportFileName(subpath: string): string {
  return `${subpath.replaceAll('/', '.')}.api.md`;
}

/** Every entry point's report, by file name under api-reports/. */
export function apiReports(root = ROOT): Map<string, string> {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Manifest;
  const reports = new Map<string, string>();
  for (const entry of entryPoints(root)) reports.set(reportFileName(entry.subpath), apiReport(manifest.name, entry.subpath, entry.types));
  return reports;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  build({ quiet: true });
  rmSync(REPORTS_DIR, { recursive: true, force: true });
  mkdirSync(REPORTS_DIR, { recursive: true });
  const reports = apiReports();
  for (const [file, text] of reports) writeFileSync(join(REPORTS_DIR, file), text);
  console.log(`api-reports/: ${reports.size} reports written (${readdirSync(REPORTS_DIR).join(', ')}); dist at ${DIST}`);
}
