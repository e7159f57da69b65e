// Loaded (--import) into every entry point a test starts (test/support/process-group.ts): when the
// test process is gone (killed by a timeout, a crash, Ctrl-C on the runner), its server is
// re-parented and nobody will stop it, so it kills its own process group. Test-only code.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid === parent) return;
  try {
    process.kill(-process.pid, 'SIGKILL'); // the group this detached child leads
  } catch {
    process.exit(1);
  }
}, 500).unref();
