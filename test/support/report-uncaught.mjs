// Loaded (--import, package.json's ava.nodeArguments) into every ava worker. ava reports an
// uncaught exception or an unhandled rejection by its value alone, and prints a DOMException as
// `DOMException {}`: no name, no message, no stack (a loaded CI run failed with just that, issue
// 23). This monitor changes nothing (ava still fails the file): it writes the error's name,
// message and stack to stderr first, so the next occurrence names its source. Test-only code.
const describe = (kind, error) => {
  const e = /** @type {any} */ (error);
  const name = e?.name ?? typeof error;
  const message = e?.message ?? String(error);
  const stack = typeof e?.stack === 'string' ? e.stack : '(no stack)';
  process.stderr.write(`[report-uncaught] ${kind}: ${name}: ${message}\n${stack}\n`);
};
process.on('uncaughtExceptionMonitor', (error, origin) => describe(origin, error));
process.on('unhandledRejection', (reason) => describe('unhandledRejection', reason));
