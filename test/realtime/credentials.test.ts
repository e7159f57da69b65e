import test from 'ava';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CredentialsError, parseDotEnv, resolveCredentials } from '../../transports/realtime/credentials.ts';

const made: string[] = [];
const dir = () => {
  const d = mkdtempSync(join(tmpdir(), 'svc-cred-'));
  made.push(d);
  return d;
};
test.after.always(() => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

test('credentials come from the environment', (t) => {
  t.deepEqual(resolveCredentials({ env: { SVC_API_KEY: 'k1', SVC_CONFIG_ID: 'svc/human-portrait' }, envFile: join(dir(), '.env') }), {
    apiKey: 'k1',
    configId: 'svc/human-portrait',
  });
});

test('credentials come from an optional .env file; the environment wins', (t) => {
  const file = join(dir(), '.env');
  writeFileSync(file, '# comment\nexport SVC_API_KEY="from-file"\nSVC_CONFIG_ID=cfg-file # trailing\n');
  t.deepEqual(resolveCredentials({ env: {}, envFile: file }), { apiKey: 'from-file', configId: 'cfg-file' });
  t.deepEqual(resolveCredentials({ env: { SVC_CONFIG_ID: 'cfg-env' }, envFile: file }), { apiKey: 'from-file', configId: 'cfg-env' });
});

test('a missing value fails clearly, naming it', (t) => {
  const file = join(dir(), '.env');
  const err = t.throws(() => resolveCredentials({ env: { SVC_API_KEY: 'k' }, envFile: file }), { instanceOf: CredentialsError });
  t.deepEqual(err?.missing, ['SVC_CONFIG_ID']);
  t.regex(err!.message, /missing SVC_CONFIG_ID: set it in the environment or in .*\.env/);
  const both = t.throws(() => resolveCredentials({ env: {}, envFile: file }), { instanceOf: CredentialsError });
  t.deepEqual(both?.missing, ['SVC_API_KEY', 'SVC_CONFIG_ID']);
});

test('.env parsing handles quotes, export, comments and blank lines', (t) => {
  t.deepEqual(parseDotEnv("A=1\n\n# x\nexport B='two words'\nC=\"q # not comment\"\nD=v # c\nnot a line\n"), {
    A: '1',
    B: 'two words',
    C: 'q # not comment',
    D: 'v',
  });
});
