// Loaded (--import) into every process of a test run: the runner's ava processes and their
// workers (scripts/run-tests.ts, package.json's ava.nodeArguments) and every entry point a test
// starts (test/support/process-group.ts). When its parent is gone (the run was killed by a CI
// timeout, a crash, Ctrl-C; the process was re-parented), nobody will stop it: it ends everything
// it started (chromium and detached servers included) and itself. A killed ava main process once
// left a worker running for minutes, launching chromium for its next test. Test-only code.
import { signalDescendants } from './process-tree.mjs';

const parent = process.ppid;
setInterval(() => {
  if (process.ppid === parent) return;
  signalDescendants(process.pid, 'SIGKILL');
  try {
    process.kill(-process.pid, 'SIGKILL'); // the group this process leads, if it leads one
  } catch {
    // leads none
  }
  process.kill(process.pid, 'SIGKILL');
}, 500).unref();
