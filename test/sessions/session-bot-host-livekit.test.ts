/**
 * The bot host with LiveKit rooms: the server creates the room through LiveKit's room API, the
 * bot in the host process joins it with its rtc-node connection (under the operator's address
 * policy, carried to the host), and a headless LiveKit visitor gets the face, the greeting's
 * transcript over data packets, and a call record when it releases. Against the local fake LiveKit
 * server (test/fakes/livekit-server.ts).
 */
import test from 'ava';
import { dispose } from '@livekit/rtc-node';
import { BotHost } from '../../server/sessions/bot-host.ts';
import { LiveKitVisitor } from '../agent/livekit-visitor.ts';
import { waitFor } from '../agent/room-visitor.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { startSessionServer, type SessionTestServer } from './session-harness.ts';

const GREETING = 'Welcome to the space station tour.';
let fake: LiveKitServerFake;
let s: SessionTestServer;

test.before(async () => {
  fake = await startLiveKitServerFake();
  s = await startSessionServer('session_bot_host_livekit', {
    config: { livekitAllowedRanges: ['127.0.0.0/8'] },
    sessions: { botHost: { nice: 0 }, livekit: { url: fake.url, apiKey: fake.apiKey, apiSecret: fake.apiSecret } },
  });
});
test.after.always(async () => {
  await s?.stop();
  await fake?.close();
  await dispose();
});

test.serial('a bot in the host process joins a LiveKit room and talks to the visitor there', async (t) => {
  const host = s.live.runner as BotHost;
  t.true(host instanceof BotHost);
  const agentId = await s.agent({ behaviour: { greeting: GREETING, greeting_mode: 'verbatim' }, starts_conversation: true });
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 200, res.text);
  t.is(res.body.room_url, fake.url);
  const visitor = await LiveKitVisitor.join(res.body.room_url, res.body.token);
  try {
    // Under a loaded CI machine the bot's encoder (rtc-node's libwebrtc) starts slowly and scales
    // down, and the host may still be warming up; the message says where the frames stopped.
    const arrived = await waitFor(() => visitor.videoFrames > 10, 60_000);
    const bot = fake.inRoom(visitor.roomName).find((p) => p.identity !== visitor.identity);
    t.true(arrived, `the face arrives through the SFU: the visitor got ${visitor.videoFrames} frames; the bot ${bot ? `joined, tracks ${JSON.stringify(bot.tracks.map((tr) => [tr.type, tr.received]))}, ${bot.media.videoFrames} frames decoded at the SFU, requests ${bot.requests.filter((r) => r !== 'ping' && r !== 'pingReq' && r !== 'trickle').join(',')}` : 'is not in the room'}; host pid ${host.pid}, sessions ${host.live}`);
    await visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    t.true(await waitFor(() => botTurns().length >= 1, 30_000), 'the greeting turn ends');
    t.is(botTurns()[0]!.text, GREETING);
    t.true(visitor.audibleMs(0) > 500, 'the greeting is heard');

    t.deepEqual((await s.release(visitor.roomName)).body, { released: 1 });
    const call = await s.endedCallOf(agentId, res.body.session_id, 15_000);
    t.like(call, { status: 'completed', termination_reason: 'client_released', participant_count: 1 });
    t.is(call.metadata.room_provider, 'livekit');
    t.is(host.live, 0);
  } finally {
    await visitor.close();
  }
});
