/**
 * A process that cannot renew its sessions' leases (its database unreachable or stalled while
 * visitors still reach it) stops those sessions `runner_lost` once their lease may have lapsed:
 * another process's reaper ends their calls and frees their slots then, and a bot still talking
 * here would run past its agent's limit. The database is reached through a real TCP relay whose
 * pause is the stall (connections stay open, nothing gets through).
 */
import test from 'ava';
import { EmbeddedRoomProvider } from '../../transports/webrtc/room-provider.ts';
import { until } from '../../testing/until.ts';
import { createTestDatabase, POSTGRES_URL } from '../server/harness.ts';
import { TcpRelay } from '../server/operations-relay.ts';
import { heldRunner } from './held-runner.ts';
import { startSessionServer } from './session-harness.ts';

const LEASE_MS = 2_000;

test('leases not renewed in time: the bots are stopped runner_lost; renewed, they run on', async (t) => {
  const db = await createTestDatabase('lease_watch');
  t.teardown(() => db.drop());
  const relay = TcpRelay.to(POSTGRES_URL);
  await relay.start();
  t.teardown(() => relay.stop());
  const runner = heldRunner();
  const s = await startSessionServer('lease_watch_server', {
    config: { databaseUrl: relay.via(db.url) },
    sessions: {
      lease: { leaseMs: LEASE_MS, heartbeatMs: 250, reaperIntervalMs: 250 },
      sessionRunner: ({ rooms, signalUrl }) => ({ runner, rooms: new EmbeddedRoomProvider(rooms.rooms, { signalUrl }), close: async () => undefined }),
    },
  });
  t.teardown(async () => {
    relay.resume();
    await s.stop();
  });
  const agentId = await s.agent();
  const connected = await s.connect({ agent_id: agentId });
  t.is(connected.status, 200, connected.text);

  // Renewed: three leases' worth of time later the bot still runs.
  await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
  t.deepEqual(runner.stops, [], 'renewed leases: nothing stopped');

  // The database stalls: after the lease (from the last renewal) the bot is stopped.
  const stalledAt = Date.now();
  relay.pause();
  await until(() => runner.stops.length > 0, { timeoutMs: 4 * LEASE_MS, intervalMs: 20, what: 'the bot stopped after its lease' });
  const after = Date.now() - stalledAt;
  t.deepEqual(runner.stops, [{ sessionId: connected.body.session_id, reason: 'runner_lost' }]);
  // Not before its lease could lapse: the last renewal started before the stall, a heartbeat (250
  // ms) before it when the machine keeps up; half a lease leaves room for a slow one (a renewal
  // slow through the relay, or a late tick, under load), as runner-sessions.test.ts does.
  t.true(after >= LEASE_MS / 2, `not before the lease could lapse (${after} ms after the stall)`);
  relay.resume();
});
