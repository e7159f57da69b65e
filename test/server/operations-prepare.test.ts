/**
 * `npm test`'s pretest (scripts/prepare-test-machine.sh) on machine states without the system
 * packages: PATH points at a scratch folder holding only what each test puts there (shims), so
 * the programs (`chromium`, `ffmpeg`, `openssl`, `gdb`, ..., `python3`) and `apt-get` are found
 * only when a test provides them. No real
 * installation happens: the `apt-get` here is a shim that records its arguments.
 */
import test from 'ava';
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');
const SCRIPT = join(ROOT, 'scripts', 'prepare-test-machine.sh');
const BASH = execFileSync('bash', ['-c', 'command -v bash']).toString().trim();
const isRoot = process.getuid?.() === 0;

function scratch(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-prepare-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function shim(dir: string, name: string, body: string): void {
  writeFileSync(join(dir, name), `#!${BASH}\n${body}\n`);
  chmodSync(join(dir, name), 0o755);
}

/** Every program the script checks but python3, and the Debian package each comes in. */
const PROGRAMS: ReadonlyArray<readonly [string, string]> = [
  ['chromium', 'chromium'],
  ['ffmpeg', 'ffmpeg'],
  ['ffprobe', 'ffmpeg'],
  ['openssl', 'openssl'],
  ['ps', 'procps'],
  ['gdb', 'gdb'],
  ['ip', 'iproute2'],
  ['iptables', 'iptables'],
  ['nft', 'nftables'],
  ['turnserver', 'coturn'],
  ['wrk', 'wrk'],
];
const ALL_PACKAGES = [...new Set(PROGRAMS.map(([, pkg]) => pkg))].join(' ');

/** Shims of every program but those named in `except`. */
function present(bin: string, except: readonly string[] = []): void {
  for (const [program] of PROGRAMS) if (!except.includes(program)) shim(bin, program, 'exit 0');
}

function run(pathDir: string, env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(BASH, [SCRIPT], { env: { PATH: pathDir, HOME: pathDir, ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr });
    });
  });
}

test('without the packages and without apt: one line naming what to install, exit 1', async (t) => {
  const bin = scratch(t);
  const r = await run(bin);
  t.is(r.code, 1);
  t.is(r.stdout, '');
  const lines = r.stderr.trim().split('\n');
  t.is(lines.length, 1, r.stderr);
  t.is(lines[0]!, `npm test needs ${ALL_PACKAGES} python3 python3-venv: install them first (Debian/Ubuntu: sudo apt-get install ${ALL_PACKAGES} python3 python3-venv), then run npm test again`);
});

test('each missing program is named by its package, once (ffmpeg brings ffprobe too)', async (t) => {
  const bin = scratch(t);
  present(bin, ['ffmpeg', 'ffprobe', 'gdb', 'turnserver']);
  shim(bin, 'python3', 'exit 0');
  const r = await run(bin);
  t.is(r.code, 1);
  t.regex(r.stderr, /^npm test needs ffmpeg gdb coturn: /);
});

test('without the human read speech of pocketsphinx-testdata (the turn corpus), that package is named', async (t) => {
  const bin = scratch(t);
  present(bin);
  shim(bin, 'python3', 'exit 0');
  const r = await run(bin, { SVC_POCKETSPHINX_DATA: bin });
  t.is(r.code, 1);
  t.regex(r.stderr, /^npm test needs pocketsphinx-testdata: install them first/);
});

test('a python3 without venv is named as python3-venv only', async (t) => {
  const bin = scratch(t);
  present(bin);
  shim(bin, 'python3', 'exit 1'); // `python3 -c "import venv, ensurepip"` fails
  const r = await run(bin);
  t.is(r.code, 1);
  t.regex(r.stderr, /^npm test needs python3-venv: /);
  t.is(r.stderr.trim().split('\n').length, 1);
});

test('with apt-get (root): apt-get update once, then one quiet install of what is missing', async (t) => {
  const bin = scratch(t);
  const log = join(bin, 'apt.log');
  present(bin, ['ffmpeg', 'ffprobe']);
  // The apt-get shim records its arguments; `install` "installs" by writing shims of the programs.
  shim(
    bin,
    'apt-get',
    `echo "$*" >> ${log}
if [ "$1" = install ]; then
  for p in "$@"; do
    case "$p" in ffmpeg|python3) for q in $p \$([ $p = ffmpeg ] && echo ffprobe); do printf '#!${BASH}\\nexit 0\\n' > ${bin}/\$q; /bin/chmod 755 ${bin}/\$q; done ;; esac
  done
fi
exit 0`,
  );
  const r = await run(bin);
  if (isRoot) {
    t.is(r.code, 0, r.stderr);
    t.regex(r.stderr, /installing ffmpeg python3 python3-venv/);
    t.deepEqual(readFileSync(log, 'utf8').trim().split('\n'), ['update -qq', 'install -y -qq --no-install-recommends ffmpeg python3 python3-venv']);
    t.true(existsSync(join(bin, 'ffmpeg')));
  } else {
    // Not root: apt-get cannot install, so it is never called; the user is told what to install.
    t.is(r.code, 1);
    t.false(existsSync(log));
    t.regex(r.stderr, /needs ffmpeg python3 python3-venv/);
  }
});

// The install path is only taken as root; elsewhere this test is skipped (reported as such).
(isRoot ? test : test.skip)('a failing apt-get install is reported with its output, exit 1', async (t) => {
  const bin = scratch(t);
  shim(bin, 'apt-get', 'if [ "$1" = install ]; then echo "E: Unable to locate package chromium" >&2; exit 100; fi; exit 0');
  const r = await run(bin);
  t.is(r.code, 1);
  t.regex(r.stderr, /E: Unable to locate package chromium/);
  t.true(r.stderr.includes(`apt-get install ${ALL_PACKAGES} python3 python3-venv failed`), r.stderr);
});

test('everything present: nothing installed, nothing printed, exit 0', async (t) => {
  const bin = scratch(t);
  present(bin);
  shim(bin, 'python3', 'exit 0');
  shim(bin, 'apt-get', `echo called > ${join(bin, 'apt.log')}`);
  const r = await run(bin);
  t.is(r.code, 0);
  t.is(r.stderr + r.stdout, '');
  t.false(existsSync(join(bin, 'apt.log')));
});
