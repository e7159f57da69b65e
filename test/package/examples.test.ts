/**
 * The examples are written the way a bot developer writes them: against the public entry points
 * only (`npm run typecheck` type-checks them; tsconfig paths map `svc-avatar/...` to the sources).
 */
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ENTRY_POINTS } from './entry-points.ts';
import { ROOT } from './build-once.ts';

const EXAMPLES = join(ROOT, 'examples');
const PUBLIC = new Set(ENTRY_POINTS.map((e) => `svc-avatar/${e.subpath}`));

test('every example imports only node builtins and the public entry points of svc-avatar', (t) => {
  t.timeout(60_000); // 15 s on a quiet 2-core machine; bounded at about four times that
  const files = readdirSync(EXAMPLES).filter((f) => f.endsWith('.ts'));
  t.true(files.length >= 4, files.join(', '));
  for (const file of files) {
    const specifiers = [...readFileSync(join(EXAMPLES, file), 'utf8').matchAll(/^import\s[^;]*?from\s+'([^']+)'/gms)].map((m) => m[1]!);
    t.true(specifiers.length > 0, `${file} imports something`);
    const internal = specifiers.filter((s) => !s.startsWith('node:') && !PUBLIC.has(s));
    t.deepEqual(internal, [], `${file} imports only public entry points`);
  }
});

test('examples/first-processor.ts runs: the processor test and the scripted conversation pass', (t) => {
  t.timeout(60_000); // 15 s on a quiet 2-core machine; bounded at about four times that
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'examples/first-processor.ts'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  t.is(result.status, 0, result.stderr);
  t.regex(result.stdout, /SpellDigits: "You have three new messages and one reminder\."/);
  t.regex(result.stdout, /the TTS speaks: "You have three new messages\."/);
});

test('examples/own-transport.ts runs: a WAV file in, the bot hears it, a WAV file out', (t) => {
  // Real time (the transport paces itself on the real clock): about 15 s, mostly waiting.
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'examples/own-transport.ts'], { cwd: ROOT, encoding: 'utf8', timeout: 90_000 });
  t.is(result.status, 0, result.stderr);
  t.regex(result.stdout, /\[user\] What can you do\?/);
  t.regex(result.stdout, /outcome: \{"how":"ended"/);
  t.regex(result.stdout, /wrote examples\/out\/own-transport\.wav \(\d+ ms\)/);
});
