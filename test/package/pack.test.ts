/**
 * The package as a bot developer meets it: `npm pack`, installed into a scratch project, used
 * from plain JavaScript (node, no tsx) and from TypeScript (tsc against the shipped .d.ts), and
 * each entry point loads only what it needs.
 *
 * Installing without the network: the tarball is extracted into scratch/node_modules/svc-avatar
 * (what `npm install <tarball>` does with the package itself), and its dependencies are the
 * repository's installed ones, linked one by one into scratch/node_modules. `npm install` would
 * fetch or rebuild ~30 dependencies (native ones included) for no extra evidence about OUR
 * package: what this test checks is the tarball's contents, its exports map and its compiled code.
 */
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ENTRY_POINTS, heavyModulesIn } from './entry-points.ts';
import { buildOnce, ROOT } from './build-once.ts';

const SCRATCH_SOURCES = new URL('./scratch/', import.meta.url);
let dir = '';
let scratch = '';
let tarballFiles: string[] = [];

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}) {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 90_000 });
  return { status: result.status, stdout: result.stdout ?? '', stderr: result.stderr ?? '', error: result.error };
}

test.before(async () => {
  buildOnce();
  dir = mkdtempSync(join(tmpdir(), 'svc-pack-'));
  const packed = run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], ROOT);
  if (packed.status !== 0) throw new Error(`npm pack failed: ${packed.stderr}`);
  const [info] = JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  tarballFiles = info!.files.map((f) => f.path);

  scratch = join(dir, 'scratch');
  const modules = join(scratch, 'node_modules');
  mkdirSync(join(modules, 'svc-avatar'), { recursive: true });
  const untar = run('tar', ['-xzf', join(dir, info!.filename), '-C', join(modules, 'svc-avatar'), '--strip-components=1'], dir);
  if (untar.status !== 0) throw new Error(`tar failed: ${untar.stderr}`);
  for (const name of readdirSync(join(ROOT, 'node_modules'))) {
    if (name.startsWith('.')) continue;
    symlinkSync(join(ROOT, 'node_modules', name), join(modules, name));
  }
  for (const file of readdirSync(SCRATCH_SOURCES)) cpSync(new URL(file, SCRATCH_SOURCES), join(scratch, file));
  writeFileSync(join(scratch, 'package.json'), JSON.stringify({ name: 'scratch-bot', private: true, type: 'module', dependencies: { 'svc-avatar': '0.1.0' } }));
});

test.after.always(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('the tarball ships compiled JavaScript and declarations of every entry point, and no tests', (t) => {
  t.timeout(90_000); // 17 s on a quiet 2-core machine; bounded at about four times that
  for (const entry of ENTRY_POINTS) {
    t.true(tarballFiles.includes(`dist/${entry.file}.js`), `dist/${entry.file}.js is packed`);
    t.true(tarballFiles.includes(`dist/${entry.file}.d.ts`), `dist/${entry.file}.d.ts is packed`);
  }
  t.deepEqual(tarballFiles.filter((f) => f.startsWith('test/') || f.includes('.test.') || f.startsWith('node_modules/')), []);
  t.true(tarballFiles.includes('dist/plugins/face/render-worker-boot.mjs'), 'the face render worker entry ships beside its code');
  t.true(tarballFiles.includes('dist/plugins/local/espeak-worker.mjs'), 'the espeak worker ships beside its code');
});

test('plain JavaScript: Pipeline and PipelineWorker from svc-avatar/core run a pipeline without tsx', (t) => {
  t.timeout(90_000); // 17 s on a quiet 2-core machine; bounded at about four times that
  const result = run(process.execPath, ['use.mjs'], scratch);
  t.is(result.status, 0, result.stderr);
  t.deepEqual(JSON.parse(result.stdout), { texts: ['HELLO', 'FROM A PACKAGE'], outcome: { how: 'ended' } });
});

test('plain JavaScript: the face engine renders on its worker thread from the installed package (worker entry and assets ship)', (t) => {
  t.timeout(90_000); // 17 s on a quiet 2-core machine; bounded at about four times that
  const result = run(process.execPath, ['face.mjs'], scratch);
  t.is(result.status, 0, result.stderr);
  t.deepEqual(JSON.parse(result.stdout), { threaded: true, format: 'rgb', width: 320, height: 180, bytes: 320 * 180 * 3 });
});

test('plain JavaScript: every entry point of the exports map imports from the installed package', (t) => {
  t.timeout(60_000); // 15 s on a quiet 2-core machine; bounded at about four times that
  const imports = ENTRY_POINTS.map((e) => `await import('svc-avatar/${e.subpath}')`).join(';');
  const result = run(process.execPath, ['--input-type=module', '-e', `${imports}; console.log('ok')`], scratch);
  t.is(result.status, 0, result.stderr);
  t.is(result.stdout.trim(), 'ok');
});

test('the svc command of the installed package runs (the service ships as sources run by tsx)', (t) => {
  t.timeout(180_000); // up to 27 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const result = run(process.execPath, [join(scratch, 'node_modules', 'svc-avatar', 'bin', 'svc.js'), '--help'], scratch);
  t.is(result.status, 0, result.stderr);
  t.regex(result.stdout, /^usage: svc <command>/);
});

test('internals stay unexported: a file that is not an entry point cannot be imported', (t) => {
  t.timeout(180_000); // up to 26 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const result = run(process.execPath, ['--input-type=module', '-e', "await import('svc-avatar/dist/core/frames.js')"], scratch);
  t.not(result.status, 0);
  t.regex(result.stderr, /ERR_PACKAGE_PATH_NOT_EXPORTED/);
});

test('TypeScript: tsc checks a bot against the shipped declaration files (and the types are not any)', (t) => {
  t.timeout(180_000); // up to 26 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const result = run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], scratch);
  t.is(result.status, 0, `${result.stdout}${result.stderr}`);
});

for (const entry of ENTRY_POINTS) {
  test(`importing svc-avatar/${entry.subpath} loads ${entry.heavy.length ? entry.heavy.join(', ') : 'no heavy optional part'}`, (t) => {
    t.timeout(180_000); // up to 22 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
    const loads = join(dir, `loads-${entry.subpath.replaceAll('/', '-')}.txt`);
    writeFileSync(loads, '');
    const result = run(process.execPath, ['--import', './record-loads.mjs', '--input-type=module', '-e', `await import('svc-avatar/${entry.subpath}')`], scratch, {
      LOADS_FILE: loads,
    });
    t.is(result.status, 0, result.stderr);
    const urls = readFileSync(loads, 'utf8').split('\n').filter(Boolean);
    t.true(urls.some((u) => u.includes(`/dist/${entry.file}.js`)), 'the recorder saw the entry point itself');
    t.deepEqual(heavyModulesIn(urls), [...entry.heavy].sort(), `heavy modules loaded by svc-avatar/${entry.subpath}`);
  });
}

test('sharp loads on first use: converting a picture for video with svc-avatar/transports/webrtc loads it (and wrtc)', (t) => {
  t.timeout(180_000); // as the imports above (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const loads = join(dir, 'loads-sharp.txt');
  writeFileSync(loads, '');
  const script = [
    "const { imageToI420 } = await import('svc-avatar/transports/webrtc');",
    "const picture = await imageToI420({ format: 'rgb', width: 4, height: 2, data: new Uint8Array(4 * 2 * 3).fill(128) });",
    'console.log(JSON.stringify({ width: picture.width, height: picture.height, bytes: picture.data.length }));',
  ].join('\n');
  const result = run(process.execPath, ['--import', './record-loads.mjs', '--input-type=module', '-e', script], scratch, { LOADS_FILE: loads });
  t.is(result.status, 0, result.stderr);
  t.deepEqual(JSON.parse(result.stdout.trim().split('\n').at(-1)!), { width: 4, height: 2, bytes: 4 * 2 + 2 * 2 });
  t.deepEqual(heavyModulesIn(readFileSync(loads, 'utf8').split('\n')), ['@roamhq/wrtc', 'sharp']);
});

test('the recorder sees heavy parts that are loaded later through require (wrtc is loaded on first use)', (t) => {
  t.timeout(180_000); // as the imports above (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const loads = join(dir, 'loads-wrtc.txt');
  writeFileSync(loads, '');
  const script = "const { createRequire } = await import('node:module'); createRequire(import.meta.url)('@roamhq/wrtc');";
  const result = run(process.execPath, ['--import', './record-loads.mjs', '--input-type=module', '-e', script], scratch, { LOADS_FILE: loads });
  t.is(result.status, 0, result.stderr);
  t.deepEqual(heavyModulesIn(readFileSync(loads, 'utf8').split('\n')), ['@roamhq/wrtc']);
});
