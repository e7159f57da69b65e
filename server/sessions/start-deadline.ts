/**
 * A bot's start bounded in time (SESSION_TIMEOUTS.startTimeoutMs): the start is given up past
 * it, and if it completes later after all, the session it made is stopped at once, so nothing it
 * started keeps running unowned.
 */
import type { RunningSession } from '../../agent/session-contract.ts';

/** The error a start given up on rejects with; `failureCode` is what the call records. */
export class StartTimeoutError extends Error {
  readonly failureCode = 'start_timeout';
}

export async function startWithin(starting: Promise<RunningSession>, ms: number, onLate: (error: unknown) => void): Promise<RunningSession> {
  let timer: NodeJS.Timeout | undefined;
  let gaveUp = false;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      gaveUp = true;
      reject(new StartTimeoutError(`the bot did not start within ${ms} ms`));
    }, ms);
    timer.unref();
  });
  // Given up on: a start that completes later is stopped; one that fails later is only reported.
  starting.then(
    (running) => {
      if (gaveUp) void running.stop('bot_start_failed').catch(onLate);
    },
    (err) => {
      if (gaveUp) onLate(err);
    },
  );
  try {
    return await Promise.race([starting, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
