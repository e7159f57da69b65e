// Child process of security-leftovers.test.ts: waits for the `go` file, takes the PGlite lock,
// prints `won` or `lost: <reason>`, holds the lock briefly, then releases it and exits.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { PgliteLock } from '../../server/db/pglite-lock.ts';

const [dir, holdMs] = [process.argv[2]!, Number(process.argv[3] ?? 1000)];
const spin = new Int32Array(new SharedArrayBuffer(4));
const deadline = Date.now() + 20_000;
while (!existsSync(join(dir, 'go')) && Date.now() < deadline) Atomics.wait(spin, 0, 0, 1);
const lock = new PgliteLock(join(dir, 'pglite'));
try {
  lock.acquire();
  process.stdout.write('won\n');
  setTimeout(() => {
    lock.release();
    process.exit(0);
  }, holdMs);
} catch (err) {
  process.stdout.write(`lost: ${(err as Error).message}\n`);
  process.exit(0);
}
