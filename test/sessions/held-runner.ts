/**
 * A session runner (the Session API's `sessionRunner` extension point) for tests of what the
 * server does around a bot: starts resolve at once, or when the test lets them (`hang`); the
 * sessions they make record every `stop` and never end by themselves.
 */
import type { RunningSession, SessionOutcome, SessionRunner, SessionStart } from '../../agent/session-contract.ts';

export interface HeldRunner extends SessionRunner {
  hang: boolean;
  readonly starts: SessionStart[];
  /** Lets the held starts complete, in order. */
  readonly held: Array<() => void>;
  readonly stops: Array<{ sessionId: string; reason: string }>;
}

export function heldRunner(): HeldRunner {
  const runner: HeldRunner = {
    hang: false,
    starts: [],
    held: [],
    stops: [],
    start(start: SessionStart): Promise<RunningSession> {
      runner.starts.push(start);
      if (!runner.hang) return Promise.resolve(session(start.sessionId));
      return new Promise((resolve) => runner.held.push(() => resolve(session(start.sessionId))));
    },
  };
  const session = (sessionId: string): RunningSession => ({
    sessionId,
    ended: new Promise<SessionOutcome>(() => undefined),
    stop: async (reason) => {
      runner.stops.push({ sessionId, reason });
      return { terminationReason: reason, failureDetail: null, participantCount: 0, metadata: {} };
    },
  });
  return runner;
}
