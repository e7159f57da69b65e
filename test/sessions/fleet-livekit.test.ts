/**
 * The fleet (issue 26) with LiveKit rooms: a runner configured with SVC_LIVEKIT_URL (and its key
 * and secret) creates each session's room on that LiveKit server and its bot joins it there; the
 * API process on another host only places the session (test/support/fleet-world.ts; the test
 * process is the visitors' machine). The LiveKit server is this repository's fake
 * (test/fakes/livekit-server.ts) in the test process, reached by the runner's host through a TCP
 * relay on the root link for its signalling and room API (its media goes straight to the fake's
 * address on that link), as a deployment's LiveKit server is reached over its network.
 *
 * One session, end to end: connect through the API process, room_url is the LiveKit server (naming the room) and
 * the room was made through its room API, the bot is the runner's (its participant in the room),
 * the visitor (the real rtc-node SDK) gets the face and hears the greeting, and release through
 * the API ends the call `client_released` and takes the bot out of the room.
 *
 * Needs root and iproute2 (fails, does not skip, without them). Time bounds only catch hangs.
 */
import test from 'ava';
import { dispose } from '@livekit/rtc-node';
import { holdsWithin, until } from '../../testing/until.ts';
import { LiveKitVisitor } from '../agent/livekit-visitor.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { TcpRelay } from '../server/operations-relay.ts';
import { sharedFleet } from '../support/fleet-tests.ts';

let fake: LiveKitServerFake | undefined;
let relay: TcpRelay | undefined;
test.after.always(async () => {
  await relay?.stop();
  await fake?.close();
  await dispose();
});

// No runner at first: the runner needs the LiveKit relay, which needs the network.
// A start includes the room API call and the bot's join through the fake SFU: on two shared cores
// that can pass the default 5 s the fleet world gives API processes.
const getFleet = sharedFleet({ label: 'fleet_livekit', runners: {}, slots: 2, apiEnv: { SVC_RUNNER_START_TIMEOUT_MS: '30000' } });

test.serial('a runner with LiveKit settings: the session room is on the LiveKit server, the runner\'s bot in it; the visitor sees and hears it; release ends it', async (t) => {
  t.timeout(300_000);
  const f = await getFleet(t);
  if (!f) return;
  // The runner is in a namespace: the SFU's media (its one ICE candidate) on the root side of its veth.
  fake = await startLiveKitServerFake({ mediaAddress: f.rootAddress });
  relay = new TcpRelay({ host: '127.0.0.1', port: Number(new URL(fake.url).port) }, f.rootAddress);
  await relay.start();
  const livekitUrl = relay.via(fake.url);
  await f.startRunner('lk1', {
    SVC_LIVEKIT_URL: livekitUrl, SVC_LIVEKIT_API_KEY: fake.apiKey, SVC_LIVEKIT_API_SECRET: fake.apiSecret,
    // The LiveKit server is on the deployment's own network: allowed, as an operator allows it.
    SVC_LIVEKIT_ALLOWED_RANGES: `${f.segment.prefix}.0/24`,
  });
  t.regex(f.runners.get('lk1')!.proc.output, /rooms: +LiveKit at /, 'the runner says where its rooms are');

  // The agent greets: what the visitor hears is the runner's bot speaking in the LiveKit room.
  const patched = await f.call('PATCH', `/v1/agents/${f.agentId}`, { behaviour: { greeting: 'Welcome aboard.', greeting_mode: 'verbatim' }, starts_conversation: true });
  t.is(patched.status, 200, JSON.stringify(patched.body));
  const connected = await f.connect();
  if (connected.status !== 200) {
    const failed = (await f.db.query(`select termination_reason, metadata from agent_calls order by started_at desc limit 1`)).rows[0];
    t.fail(`connect ${connected.status} ${JSON.stringify(connected.body)}; the call: ${JSON.stringify(failed)}; LiveKit API requests ${JSON.stringify(fake.roomApiRequests)}, participants ${JSON.stringify(fake.participants.map((p) => p.identity))}; the runner: ${f.runners.get('lk1')!.proc.output.split('\n').slice(-12).join(' | ')}; API: ${f.apis[0]!.proc.output.split('\n').filter((l) => /error|fail|warn/i.test(l)).slice(-5).join(' | ')}`);
    return;
  }
  const roomUrl = new URL(connected.body.room_url);
  t.is(`${roomUrl.origin}${roomUrl.pathname}`, livekitUrl, 'room_url is the LiveKit server');
  t.true(fake.roomApiRequests.includes('CreateRoom'), 'the room was made through the LiveKit room API');
  const visitor = await LiveKitVisitor.join(connected.body.room_url, connected.body.token);
  try {
    const bot = () => fake!.inRoom(visitor.roomName).find((p) => p.identity !== visitor.identity);
    await until(() => bot() !== undefined, { timeoutMs: 30_000, intervalMs: 50, what: "the runner's bot in the LiveKit room" });
    const frames = await holdsWithin(() => visitor.videoFrames > 25, { timeoutMs: 60_000, intervalMs: 50 });
    t.true(frames, `the face arrives at the visitor through LiveKit (${visitor.videoFrames} frames)`);
    t.true(visitor.trackOwners.has(bot()!.identity), "the tracks are the runner's bot's");
    const session = (await f.db.query(`select session_id, runner_id, room_provider from agent_sessions where room = $1`, [visitor.roomName])).rows[0];
    t.like(session, { runner_id: 'lk1', room_provider: 'livekit' });
    await visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const heard = await holdsWithin(() => visitor.audibleMs(0) > 500, { timeoutMs: 30_000, intervalMs: 50 });
    t.true(heard, `the greeting is heard (${visitor.audibleMs(0)} ms audible)`);

    // Released through the API process by its room, the one the room_url names (spec: "taken from the room_url").
    t.is(roomUrl.searchParams.get('room'), visitor.roomName, 'the room_url names the room the visitor joined');
    const res = await fetch(`${f.apis[0]!.url}/v1/public/agents/connect/${encodeURIComponent(visitor.roomName)}`, { method: 'POST' });
    f.started.delete(connected.body.room_url);
    t.like(await res.json(), { released: 1 });
    const call = await f.endedCall(session.session_id, 30_000);
    t.like(call, { status: 'completed', termination_reason: 'client_released', metadata: { room_provider: 'livekit' } });
    await until(() => bot() === undefined, { timeoutMs: 30_000, intervalMs: 50, what: 'the bot gone from the room after the release' });
  } finally {
    await visitor.close();
  }
});
