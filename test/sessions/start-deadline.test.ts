/**
 * A bot start that never finishes (a face worker or a bot host that stops answering) is given up
 * at SESSION_TIMEOUTS.startTimeoutMs: the visitor gets orchestrator_error, the call records
 * bot_start_failed / start_timeout, the agent's slot and the start slot are free for the next
 * connect, and a start that completes after all is stopped at once. The session runner here is
 * the Session API's documented extension point (`sessionRunner`), whose start the test holds.
 */
import test from 'ava';
import { SESSION_TIMEOUTS } from '../../agent/session-contract.ts';
import { EmbeddedRoomProvider } from '../../transports/webrtc/room-provider.ts';
import { until } from '../../testing/until.ts';
import { heldRunner } from './held-runner.ts';
import { startSessionServer } from './session-harness.ts';

const START_TIMEOUT_MS = 400;

const runner = heldRunner();
runner.hang = true;

test('a bot start that hangs is given up at the start timeout: orchestrator_error, bot_start_failed/start_timeout, the slots freed, a late start stopped', async (t) => {
  t.is(SESSION_TIMEOUTS.startTimeoutMs, 30_000, 'the default');
  const s = await startSessionServer('start_deadline', {
    sessions: {
      startTimeoutMs: START_TIMEOUT_MS,
      sessionRunner: ({ rooms, signalUrl }) => ({ runner, rooms: new EmbeddedRoomProvider(rooms.rooms, { signalUrl }), close: async () => undefined }),
    },
  });
  t.teardown(() => s.stop());
  const agentId = await s.agent({ max_concurrency: 1 });

  const hung = await s.connect({ agent_id: agentId });
  t.is(hung.status, 502, hung.text);
  t.is(hung.body.error_code, 'orchestrator_error');
  const firstSession = runner.starts[0]!.sessionId;
  const call = await s.endedCallOf(agentId, firstSession);
  t.is(call.status, 'failed');
  t.is(call.termination_reason, 'bot_start_failed');
  t.is(call.failure_reason, 'start_timeout');

  // The agent's one slot, and the start slot, are free: the next connect starts at once.
  runner.hang = false;
  const next = await s.connect({ agent_id: agentId });
  t.is(next.status, 200, next.text);
  t.is(runner.starts.length, 2);

  // The given-up start completes after all: its session is stopped at once, nothing left running.
  runner.held[0]!();
  await until(() => runner.stops.some((x) => x.sessionId === firstSession), { timeoutMs: 5_000, what: 'the late start stopped' });
  t.deepEqual(runner.stops.find((x) => x.sessionId === firstSession), { sessionId: firstSession, reason: 'bot_start_failed' });
  t.false(runner.stops.some((x) => x.sessionId === next.body.session_id), 'the live session is untouched');
});
