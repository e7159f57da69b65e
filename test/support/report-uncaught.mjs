// Loaded (--import, package.json's ava.nodeArguments) into every ava worker. ava reports an
// uncaught exception or an unhandled rejection by its value alone, and prints a DOMException as
// `DOMException {}`: no name, no message, no stack (a loaded CI run failed with just that, issue
// 23). This monitor changes nothing (ava still fails the file): it writes the error's name,
// message and stack to stderr, so the next occurrence names its source. An uncaught exception is
// written at once; a rejection only if it is still unhandled when the process exits (a test may
// handle a rejection a little later, which ava accepts too). Test-only code.
const describe = (kind, error) => {
  const e = /** @type {any} */ (error);
  const name = e?.name ?? typeof error;
  const message = e?.message ?? String(error);
  const stack = typeof e?.stack === 'string' ? e.stack : '(no stack)';
  process.stderr.write(`[report-uncaught] ${kind}: ${name}: ${message}\n${stack}\n`);
};
const unhandled = new Map();
process.on('uncaughtExceptionMonitor', (error, origin) => describe(origin, error));
process.on('unhandledRejection', (reason, promise) => unhandled.set(promise, reason));
process.on('rejectionHandled', (promise) => unhandled.delete(promise));
process.on('exit', () => {
  for (const reason of unhandled.values()) describe('unhandledRejection', reason);
});
