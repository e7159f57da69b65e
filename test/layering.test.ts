/**
 * The layers of ../shared/design/ARCHITECTURE.md, enforced: imports only point down.
 *
 *   core < processors < transports < plugins < agent < server
 *
 * `protocol/` (wire contracts) is shared by everything and imports nothing of ours; `clients/`
 * talk to the server over the wire, so they never reach into the server, the agent layer or a
 * plugin, and the server never reaches into a client (what both need, like the widget's version,
 * is a wire contract in protocol/). A plugin does not reach into another plugin (the registry is
 * how plugins meet), nor does the server (it asks the registry); an agent is assembled from
 * processors and transports, never from a vendor's code. `testing/` (the test kit shipped with
 * the framework) stands on the framework only. The environment is read in one place of server/
 * and agent/: server/config/env.ts.
 *
 * Every static import, re-export and dynamic `import('...')` of a source file is resolved to the
 * top-level folder it lands in.
 */
import test from 'ava';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** What each layer may import, besides itself. */
const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  core: [],
  protocol: [],
  processors: ['core'],
  transports: ['core', 'processors', 'protocol'],
  plugins: ['core', 'processors', 'transports', 'protocol'],
  agent: ['core', 'processors', 'transports', 'protocol'],
  server: ['core', 'processors', 'transports', 'agent', 'protocol'],
  clients: ['core', 'processors', 'transports', 'protocol'],
  testing: ['core', 'processors', 'transports', 'protocol'],
};

const SOURCE = /\.(ts|mts|mjs|js)$/;
const IMPORT = /(?:^|[\s;])(?:import|export)\s[^'"`;]*?from\s*['"]([^'"]+)['"]|(?:^|[\s;])import\s*['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/g;

function* sourceFiles(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sourceFiles(path);
    else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) yield path;
  }
}

/** Comments out of the way, so a `from '../server/x'` in a doc comment is not an import. */
function stripComments(code: string): string {
  return code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

interface LayerImport {
  readonly file: string;
  readonly specifier: string;
  /** Top-level folder of the imported file (`core`, `agent`, ...). */
  readonly target: string;
}

function importsOf(file: string): LayerImport[] {
  return importsIn(readFileSync(file, 'utf8'), file);
}

function importsIn(source: string, file: string): LayerImport[] {
  const code = stripComments(source);
  const out: LayerImport[] = [];
  for (const m of code.matchAll(IMPORT)) {
    const specifier = m[1] ?? m[2] ?? m[3]!;
    if (!specifier.startsWith('.')) continue; // packages and node: builtins
    const target = relative(ROOT, resolve(dirname(file), specifier)).split(sep)[0]!;
    out.push({ file: relative(ROOT, file), specifier, target });
  }
  return out;
}

function violations(layer: string): string[] {
  return check(layer, [...sourceFiles(join(ROOT, layer))].flatMap(importsOf));
}

function check(layer: string, imports: readonly LayerImport[]): string[] {
  const allowed = new Set([layer, ...ALLOWED[layer]!]);
  const bad: string[] = [];
  for (const imp of imports) {
    if (!allowed.has(imp.target)) bad.push(`${imp.file} imports ${imp.specifier} (${imp.target}/)`);
    // Within plugins/, each plugin keeps to its own folder.
    if (layer === 'plugins' && imp.target === 'plugins') {
      const own = imp.file.split(sep)[1];
      const other = relative(ROOT, resolve(dirname(join(ROOT, imp.file)), imp.specifier)).split(sep)[1];
      if (own !== other) bad.push(`${imp.file} imports another plugin: ${imp.specifier}`);
    }
  }
  return bad;
}

for (const layer of Object.keys(ALLOWED)) {
  test(`${layer}/ imports only ${[layer, ...ALLOWED[layer]!].join(', ')}`, (t) => {
    t.deepEqual(violations(layer), []);
  });
}

test('the checker catches what climbs up, in every import form, and ignores comments', (t) => {
  const file = join(ROOT, 'processors', 'stt', 'example.ts');
  const source = [
    "import { OutputTransport } from '../../transports/output-transport.ts';",
    "import type { Agent } from '../../agent/agent-pipeline.ts';",
    "export * from '../../server/app.ts';",
    "import '../../plugins/face/index.ts';",
    "const later = await import('../../agent/bot-runner.ts');",
    "// import { x } from '../../server/commented-out.ts';",
    '/* export { y } from "../../agent/in-a-block-comment.ts"; */',
    "import { frame } from '../../core/frames.ts';",
    "import { Subject } from 'rxjs';",
  ].join('\n');
  const found = importsIn(source, file);
  t.deepEqual(found.map((i) => i.target), ['transports', 'agent', 'server', 'plugins', 'agent', 'core']);
  t.is(check('processors', found).length, 5);
  t.deepEqual(check('plugins', importsIn("import { X } from '../face/index.ts';", join(ROOT, 'plugins', 'local', 'x.ts'))), ['plugins/local/x.ts imports another plugin: ../face/index.ts']);
  // The server reaching up into a client (the widget's version used to live in clients/web/).
  t.deepEqual(check('server', importsIn("import { WIDGET_VERSION } from '../../clients/web/version.ts';", join(ROOT, 'server', 'widget', 'index.ts'))), [
    'server/widget/index.ts imports ../../clients/web/version.ts (clients/)',
  ]);
  // The real tree is scanned too, dynamic imports included.
  t.true([...sourceFiles(join(ROOT, 'agent'))].flatMap(importsOf).some((i) => i.target === 'transports' && i.specifier.includes('livekit')));
});

test('the voice pipeline is composed in agent/, not in processors/', (t) => {
  const names = [...sourceFiles(join(ROOT, 'processors'))].map((f) => relative(ROOT, f));
  t.false(names.includes(join('processors', 'voice-pipeline.ts')));
  t.true([...sourceFiles(join(ROOT, 'agent'))].some((f) => f.endsWith(join('agent', 'voice-pipeline.ts'))));
});

/** Where server/ and agent/ read the environment: only the configuration module. */
const ENV_READER = join('server', 'config', 'env.ts');

test('the environment is read in one module of server/ and agent/ (server/config/env.ts)', (t) => {
  const readers = ['server', 'agent']
    .flatMap((layer) => [...sourceFiles(join(ROOT, layer))])
    .filter((file) => /\bprocess\.env\b/.test(stripComments(readFileSync(file, 'utf8'))))
    .map((file) => relative(ROOT, file));
  t.deepEqual(readers, [ENV_READER]);
});

test('the import graph between layers (report)', (t) => {
  const edges = new Map<string, number>();
  for (const layer of Object.keys(ALLOWED)) {
    for (const imp of [...sourceFiles(join(ROOT, layer))].flatMap(importsOf)) {
      if (imp.target === layer) continue;
      const edge = `${layer} -> ${imp.target}`;
      edges.set(edge, (edges.get(edge) ?? 0) + 1);
    }
  }
  const report = [...edges].sort(([a], [b]) => a.localeCompare(b)).map(([edge, n]) => `${edge} (${n})`);
  t.log(report.join('\n'));
  // Every edge of the report is one the layers allow (the tests above say which file if not).
  t.true([...edges.keys()].every((edge) => {
    const [from, to] = edge.split(' -> ') as [string, string];
    return ALLOWED[from]!.includes(to);
  }));
});
