#!/usr/bin/env node
// Runs the TypeScript CLI (server/cli/svc.ts) through tsx, forwarding arguments and exit code.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const tsxCli = require.resolve('tsx/cli');
const entry = fileURLToPath(new URL('../server/cli/svc.ts', import.meta.url));
const result = spawnSync(process.execPath, [tsxCli, entry, ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(result.status ?? 1);
