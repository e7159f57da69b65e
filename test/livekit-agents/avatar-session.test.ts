/**
 * Our face in a real LiveKit Agents (Node) agent: `@livekit/agents` from npm, its `AgentSession`
 * in a room on the fake LiveKit server (test/fakes/livekit-server.ts, forwarding media and data
 * packets as an SFU), our `AvatarSession` (svc-avatar/livekit-agents) started beside it, our
 * service (POST /v1/avatar-sessions, real PostgreSQL, the real human-portrait face). Scripted
 * services: the agent speaks with `session.say(text, { audio })`, the audio made by our offline
 * voice at 24 kHz; it hears the visitor with an energy VAD (energy-vad.ts). The visitor is a
 * plain rtc-node participant.
 *
 * Proves: the visitor receives the avatar's video (the configured size, mouth moving with the
 * speech) and the agent's audio (the phrase recognised), both from the avatar's identity, which
 * publishes on behalf of the agent; the agent's `playback_finished` carries the played
 * position; the visitor speaking interrupts the agent, `lk.clear_buffer` reaches our worker and
 * the visitor's audio goes silent; the agent leaving ends our session and frees its capacity slot.
 */
import test from 'ava';
import { ReadableStream } from 'node:stream/web';
import { AgentSession, Agent, AudioOutput, initializeLogger, type PlaybackFinishedEvent } from '@livekit/agents';
import { AudioFrame, dispose, Room } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';
import { concat, rms } from '../../core/audio.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { AvatarSession } from '../../clients/livekit-agents/index.ts';
import { mountAvatarSessions, type MountedAvatarSessions } from '../../server/avatar-sessions/index.ts';
import { createCapacityGate, type CapacityGate } from '../../server/capacity/index.ts';
import { LiveKitVisitor } from '../agent/livekit-visitor.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { recognise, regionMotion, speech, tailHeard } from '../sessions/conversation-audio.ts';
import { until } from '../../testing/until.ts';
import { EnergyVAD } from './energy-vad.ts';

const PHRASE = 'Welcome to the space station tour.';
const TTS_RATE = 24_000;
const voice = new LocalTTSService();
let fake: LiveKitServerFake;
let ts: TestServer;
let capacity: CapacityGate;
let avatars: MountedAvatarSessions;

initializeLogger({ pretty: false, level: 'warn' });

test.before(async () => {
  fake = await startLiveKitServerFake();
  // The fake listens on loopback: opened the way an operator would (SVC_LIVEKIT_ALLOWED_RANGES).
  ts = await startTestServer({ label: 'lk_agents_avatar', plugins: [facePlugin], config: { livekitAllowedRanges: ['127.0.0.0/8'] } });
  // Count limit only: this test is about the protocol, and on the shared CI machine the load
  // check refuses admission whenever the other test files load the cores (its own tests prove it).
  capacity = createCapacityGate({ limit: 2, loadCheck: false });
  avatars = mountAvatarSessions(ts.server, { capacity });
  await voice.warmUp();
});
test.after.always(async () => {
  await avatars?.close();
  capacity?.close();
  await ts?.stop();
  await fake?.close();
  await dispose();
});

async function token(identity: string, room: string, kind?: string): Promise<string> {
  const at = new AccessToken(fake.apiKey, fake.apiSecret, { identity, ttl: 600 });
  if (kind) at.kind = kind;
  at.addGrant({ roomJoin: true, room, canPublish: true, canSubscribe: true, canPublishData: true });
  return at.toJwt();
}

/** The offline voice at the TTS rate, as the agent's 20 ms AudioFrames. */
async function ttsFrames(text: string): Promise<AudioFrame[]> {
  const parts: Int16Array[] = [];
  for await (const e of voice.synthesize({ text, language: 'en', sampleRate: TTS_RATE })) if (e.type === 'audio') parts.push(e.pcm);
  const pcm = concat(parts);
  const n = TTS_RATE / 50;
  const frames: AudioFrame[] = [];
  for (let i = 0; i < pcm.length; i += n) {
    const chunk = new Int16Array(n);
    chunk.set(pcm.subarray(i, i + n));
    frames.push(new AudioFrame(chunk, TTS_RATE, 1, n));
  }
  return frames;
}

const streamOf = (frames: AudioFrame[]) =>
  new ReadableStream<AudioFrame>({
    start(controller) {
      for (const f of frames) controller.enqueue(f);
      controller.close();
    },
  });

test.serial('a LiveKit Agents AgentSession speaks through our avatar; interruption and leaving work', async (t) => {
  t.timeout(180_000); // up to 22 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const roomName = 'lk-agents-room-1';
  const agentRoom = new Room();
  await agentRoom.connect(fake.url, await token('agent-1', roomName, 'agent'), { autoSubscribe: true, dynacast: false });
  t.teardown(() => agentRoom.disconnect().catch(() => undefined));
  const visitor = await LiveKitVisitor.join(fake.url, await token('visitor-1', roomName));
  t.teardown(() => visitor.close());
  const audio: { at: number; pcm: Int16Array; rate: number }[] = [];
  const motion: { at: number; mouth: number }[] = [];
  let last: Uint8Array | null = null;
  visitor.onAudio = (samples, rate, _channels, at) => audio.push({ at, pcm: Int16Array.from(samples), rate });
  visitor.onVideoFrame = (frame, at) => {
    const luma = frame.data.subarray(0, frame.width * frame.height);
    if (last && last.length === luma.length) motion.push({ at, mouth: regionMotion(last, luma, frame.width, frame.height, [0.4, 0.38, 0.5, 0.47]) });
    last = Uint8Array.from(luma);
  };

  // The agent: a real AgentSession, our AvatarSession started beside it (before session.start).
  const session = new AgentSession({ vad: new EnergyVAD() });
  t.teardown(() => session.close().catch(() => undefined));
  // A small face (384x216, the default's 16:9): the fake SFU decodes and re-encodes what it
  // forwards with libwebrtc, and this machine is shared; the protocol does not depend on the size.
  const config = await ts.call('POST', '/v1/model-configs', { body: { title: 'small portrait', model_variant_id: 'svc/human-portrait/v1', model_configurations: { width: 384, height: 216 } } });
  t.is(config.status, 201, config.text);
  const avatar = new AvatarSession({ apiUrl: ts.url, apiKey: ts.keyA, configId: config.body.model_config_id });
  const started = await avatar.start(session, agentRoom, { livekitUrl: fake.url, livekitApiKey: fake.apiKey, livekitApiSecret: fake.apiSecret });
  t.is(started['status'], 'active');
  t.is(started['avatar_identity'], 'svc-avatar');
  t.is(started['agent_identity'], 'agent-1');
  t.is(capacity.snapshot().inUse, 1, 'the session holds a capacity lease');
  const orgId = (await ts.server.services.apiKeys.authenticate(ts.keyA))!.organizationId;
  await session.start({ agent: new Agent({ instructions: 'You are the tour guide.' }), room: agentRoom });
  const finished: PlaybackFinishedEvent[] = [];
  session.output.audio!.on(AudioOutput.EVENT_PLAYBACK_FINISHED, (ev: PlaybackFinishedEvent) => finished.push(ev));

  // The avatar is in the room on behalf of the agent, and its face reaches the visitor.
  await until(() => visitor.videoFrames > 10, { what: 'the idle face at the visitor', timeoutMs: 30_000 }).catch(async (error: unknown) => {
    t.log(JSON.stringify(fake.participants.map((p) => ({ id: p.identity, tracks: p.tracks, media: p.media, forwarded: p.forwarded, refusals: p.refusals, pub: p.publisherState, sub: p.subscriberState }))));
    const avatarSid = fake.participants.find((p) => p.identity === 'svc-avatar')!.sid;
    t.log(JSON.stringify(await fake.inboundStats(avatarSid)));
    t.log((await ts.call('GET', `/v1/avatar-sessions/${String(started['avatar_session_id'])}`)).text);
    throw error;
  });
  const visitorRoom = (visitor as unknown as { room: Room }).room;
  t.is(visitorRoom.remoteParticipants.get('svc-avatar')?.attributes['lk.publish_on_behalf'], 'agent-1');
  t.deepEqual([...visitor.trackOwners], ['svc-avatar'], 'every track the visitor gets is the avatar\'s');
  const size = visitor.videoSize!;
  t.true(size.width <= 384 && size.height <= 216 && size.width >= 128 && Math.abs(size.width / size.height - 384 / 216) < 0.1, `picture ${size.width}x${size.height} (the configured 384x216, or scaled down by the encoder on a loaded machine)`);
  t.deepEqual((await ts.call('GET', `/v1/avatar-sessions/${String(started['avatar_session_id'])}`)).body.video, { width: 384, height: 216, fps: 25 });

  // The idle face is measured on a settled stream: the first second or so after the video starts
  // (the forwarding encoder ramping its quality, on a loaded machine its resolution) changes the
  // mouth region more than speech does (a CI run under a CPU hog read idle 8.7 against speaking 7.9).
  const settled = visitor.videoFrames + 50;
  await until(() => visitor.videoFrames > settled, { what: 'two more seconds of the idle face', timeoutMs: 30_000 });
  const idleFrom = motion.at(-25)?.at ?? 0;

  // The agent speaks: the visitor hears the phrase and sees the mouth move; playback_finished comes with the position.
  const frames = await ttsFrames(PHRASE);
  const durationS = frames.length * 0.02;
  const saidAt = Date.now();
  const handle = session.say(PHRASE, { audio: streamOf(frames) });
  await handle.waitForPlayout();
  t.false(handle.interrupted);
  await until(() => finished.length >= 1, { what: 'playback_finished at the agent' });
  t.false(finished[0]!.interrupted);
  t.true(Math.abs(finished[0]!.playbackPosition - durationS) <= 0.05, `played position ${finished[0]!.playbackPosition} s of ${durationS.toFixed(2)} s sent`);
  await tailHeard(visitor, { timeoutMs: 30_000 });
  const heardAudio = audio.filter((a) => a.at >= saidAt);
  t.deepEqual(await recognise(concat(heardAudio.map((a) => a.pcm)), heardAudio[0]!.rate, [PHRASE, 'What is your name?', 'Goodbye']), [PHRASE], 'the agent\'s speech, from the avatar');
  const idle = motion.filter((m) => m.at >= idleFrom && m.at < saidAt);
  const speaking = motion.filter((m) => visitor.audioLevels.some((l) => Math.abs(l.at - m.at) < 40 && l.rms > 0.02));
  const mean = (xs: { mouth: number }[]) => xs.reduce((a, b) => a + b.mouth, 0) / Math.max(1, xs.length);
  t.true(idle.length > 5 && speaking.length > 5, `frames: ${idle.length} idle, ${speaking.length} speaking`);
  t.log(`mouth region change: speaking ${mean(speaking).toFixed(2)} (${speaking.length} frames), idle ${mean(idle).toFixed(2)} (${idle.length} frames)`);
  t.true(mean(speaking) > mean(idle) * 1.5, `mouth region change speaking ${mean(speaking).toFixed(2)} vs idle ${mean(idle).toFixed(2)}`);

  // An interruption: the visitor speaks over a long answer; the agent's VAD hears it, the agent
  // clears the avatar's buffer, and the avatar goes silent at the visitor.
  const long = await ttsFrames('This is a very long answer about the station, its modules, its crew, its history and its orbit around the earth, which goes on and on.');
  const longAt = Date.now();
  const interrupted = session.say('long answer', { audio: streamOf(long) });
  await until(() => visitor.audibleMs(longAt) > 600, { what: 'the long answer heard', timeoutMs: 20_000 });
  visitor.say(await speech(voice, 'What is your name?'));
  await interrupted.waitForPlayout();
  t.true(interrupted.interrupted, 'the agent was interrupted by the visitor');
  const view = () => avatars.sessions.get(orgId, String(started['avatar_session_id']))!;
  await until(() => (view()['metrics'] as { clears: number }).clears >= 1, { what: 'lk.clear_buffer at our worker' });
  const clearAt = Date.parse(String((view()['metrics'] as { last_clear_at: string }).last_clear_at));
  await until(() => finished.length >= 2, { what: 'playback_finished (interrupted) at the agent' });
  t.true(finished[1]!.interrupted);
  t.true(finished[1]!.playbackPosition > 0.3 && finished[1]!.playbackPosition < long.length * 0.02 - 1, `interrupted at ${finished[1]!.playbackPosition} s of ${(long.length * 0.02).toFixed(1)} s`);
  // The answer would have gone on for seconds: after the clear, the visitor hears no more of it.
  // Judged on content, not on arrival times: every loud 10 ms the visitor received of this answer
  // against the loud 10 ms of the answer up to the position the worker reported played. On a
  // loaded machine the way through the fake SFU (then a decode, jitter buffer and re-encode; now
  // packets forwarded on one JavaScript event loop: docs/livekit-agents.md) delayed what was
  // played before the clear by up to seconds (local CI run E1 under a hog: 1,020 ms of loud audio
  // arrived in the 1.5 s after the clear, the last 1,425 ms after it), and counting arrivals after the clear
  // counted that delay as sound not stopped. How soon the sound stops is the bench's figure
  // (npm run bench -- livekit-avatar), logged here.
  await until(() => visitor.audioLevels.some((l) => l.at > clearAt + 3000), { what: '3 s of audio after the clear', timeoutMs: 20_000 });
  const loudChunks = (frames: AudioFrame[], fromS: number, toS: number) => {
    const pcm = concat(frames.map((f) => f.data));
    const n = TTS_RATE / 100;
    let loud = 0;
    for (let i = Math.round(fromS * TTS_RATE); i + n <= Math.min(pcm.length, Math.round(toS * TTS_RATE)); i += n) if (rms(pcm.subarray(i, i + n)) > 0.01) loud++;
    return loud;
  };
  const playedS = finished[1]!.playbackPosition;
  const playedLoudMs = loudChunks(long, 0, playedS) * 10;
  const restLoudMs = loudChunks(long, playedS, long.length * 0.02) * 10;
  const heardLoudMs = visitor.audibleMs(longAt);
  const loudAfterClear = visitor.audioLevels.filter((l) => l.at >= clearAt && l.rms > 0.01);
  const lastLoud = loudAfterClear.at(-1)?.at;
  t.log(
    `after the clear_buffer at the worker: ${loudAfterClear.length * 10} ms of loud audio arrived at the visitor, the last ${lastLoud === undefined ? '-' : lastLoud - clearAt} ms after it (goal < 100 ms: npm run bench -- livekit-avatar); ` +
      `heard ${heardLoudMs} ms loud of the answer, which holds ${playedLoudMs} ms loud up to the played position ${playedS.toFixed(2)} s and ${restLoudMs} ms after it`,
  );
  t.true(restLoudMs > 1000, 'the interruption came with most of the answer left');
  // Slack for the fade-out at the cut and the receivers' concealment and time stretching.
  const allowedMs = Math.min(playedLoudMs + restLoudMs / 2, playedLoudMs * 1.2 + 500);
  t.true(heardLoudMs <= allowedMs, `silence after the clear (not the rest of the answer): heard ${heardLoudMs} ms loud, at most ${Math.round(allowedMs)} ms allowed`);
  t.true(heardLoudMs >= playedLoudMs * 0.5, `the answer up to the clear was heard: ${heardLoudMs} ms loud of ${playedLoudMs} ms`);

  // The agent leaves: our session ends and gives its slot back.
  await session.close();
  await agentRoom.disconnect();
  await until(() => view()['status'] === 'ended', { what: 'the avatar session ends', timeoutMs: 20_000 });
  t.is(view()['end_reason'], 'agent_left');
  t.is(capacity.snapshot().inUse, 0, 'the capacity slot is free');
  await until(() => !fake.inRoom(roomName).some((p) => p.identity === 'svc-avatar'), { what: 'the avatar out of the room' });
});
