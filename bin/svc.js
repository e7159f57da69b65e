#!/usr/bin/env node
// Runs the TypeScript CLI (server/cli/svc.ts) in this process: tsx's loader is registered here
// (no second Node.js process, as `tsx` itself would start), then the CLI's exit code is ours.
import { register } from 'tsx/esm/api';

register();
const { runCli } = await import('../server/cli/svc.ts');
process.exitCode = await runCli(process.argv.slice(2));
