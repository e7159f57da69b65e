/**
 * Where the server's log lines go: stdout (or another file), written asynchronously and in
 * batches. One line per request was one write system call per request (through libuv's thread
 * pool); lines are now gathered up to `minLength` bytes and written together, and a timer flushes
 * what is gathered every `flushIntervalMs`, so a line waits that long at most. Flush it once more
 * (`flushSync`) before the process exits.
 */
import { pino } from 'pino';

export const LOG_DESTINATION = {
  /** Bytes gathered before a write. */
  minLength: 4096,
  /** Longest a line waits to be written. */
  flushIntervalMs: 100,
} as const;

export function createLogDestination(dest: number | string = 1): ReturnType<typeof pino.destination> {
  const destination = pino.destination({ dest, sync: false, minLength: LOG_DESTINATION.minLength });
  const timer = setInterval(() => {
    try {
      destination.flush();
    } catch {
      // not ready yet, or closed: the next tick or the exit's flushSync writes it
    }
  }, LOG_DESTINATION.flushIntervalMs);
  timer.unref();
  destination.once('close', () => clearInterval(timer));
  return destination;
}
