/**
 * Where the server's log lines go: stdout (or another file), written asynchronously and in
 * batches. One line per request was one write system call per request (through libuv's thread
 * pool); lines are now gathered up to `minLength` bytes and written together, and a timer flushes
 * what is gathered every `flushIntervalMs`, so a line waits that long at most. Flush it once more
 * (`flushSync`) before the process exits.
 *
 * Lines are gathered here, in an array, before pino's destination (sonic-boom) sees them: its own
 * gathering measures the byte length of the text gathered so far on every write (a string grown
 * by concatenation, flattened each time: about 4 us per line at 4-16 KiB gathered, most of the
 * cost of a request's log line); here a line costs an array push, and the destination gets one
 * string per `minLength` characters.
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
  gatherLines(destination);
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

type Destination = ReturnType<typeof pino.destination>;

/** Lines gathered in an array up to `minLength` characters, then written to `destination` as one string; every other entry point writes them first. */
function gatherLines(destination: Destination): void {
  const write = destination.write.bind(destination);
  const destroyed = () => (destination as unknown as { destroyed: boolean }).destroyed;
  let lines: string[] = [];
  let length = 0;
  const drain = () => {
    if (lines.length === 0) return;
    const text = lines.length === 1 ? lines[0]! : lines.join('');
    lines = [];
    length = 0;
    write(text);
  };
  destination.write = (data: string) => {
    if (destroyed()) return write(data); // throws as the destination does
    const line = '' + data;
    lines.push(line);
    length += line.length;
    if (length >= LOG_DESTINATION.minLength) drain();
    return true;
  };
  for (const name of ['flush', 'flushSync', 'end', 'reopen'] as const) {
    const method = (destination[name] as (...args: unknown[]) => unknown).bind(destination);
    (destination as unknown as Record<string, unknown>)[name] = (...args: unknown[]) => {
      if (!destroyed()) drain();
      return method(...args);
    };
  }
}
