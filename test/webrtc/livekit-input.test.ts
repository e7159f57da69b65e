/**
 * The LiveKit bot room and its input transport, through the fake LiveKit server acting as a small
 * SFU (test/fakes/livekit-server.ts): a visitor participant (the real rtc-node SDK) publishes a
 * generated tone as its microphone; the bot (`LiveKitBotRoom`, one rtc-node connection) is
 * forwarded that track and `LiveKitAudioInput` turns it into `input-audio` frames at the
 * pipeline's rate with the tone's energy and pitch. Session messages travel both ways as reliable
 * data packets on the `session` topic, with the embedded room's checks; presence follows the
 * visitor in and out.
 */
import test from 'ava';
import { AudioFrame, AudioSource, LocalAudioTrack, dispose, Room, RoomEvent, TrackPublishOptions, TrackSource } from '@livekit/rtc-node';
import { AccessToken, TrackSource as GrantSource, type VideoGrant } from 'livekit-server-sdk';
import { Pipeline, PipelineWorker, RealClock, type FrameOf } from '../../core/index.ts';
import { rms } from '../../core/audio.ts';
import { CaptureProcessor } from '../../core/testing/index.ts';
import { LIVEKIT_SESSION_TOPIC, LiveKitAudioInput, LiveKitBotRoom } from '../../transports/livekit/index.ts';
import { ROOM_AUDIO_INPUT_DEFAULTS, type RoomClientMessage, type RoomSubscriberEvent } from '../../transports/webrtc/index.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { until } from '../../testing/until.ts';

/** The fake listens on loopback: opened the way an operator would (SVC_LIVEKIT_ALLOWED_RANGES). */
const LOOPBACK = ['127.0.0.0/8'];

test.after.always(async () => {
  await dispose();
});

/**
 * Listeners on rtc-node's process-wide FFI event emitter (`FfiClient.instance`, kept on
 * globalThis): every Room, source and stream adds one and must take it off when it ends, or the
 * events of every later room run through it (a leak that grows with the sessions served).
 */
function ffiListeners(): number {
  const client = (globalThis as { _ffiClientInstance?: { listenerCount(event: string): number } })._ffiClientInstance;
  return client?.listenerCount('ffi_event') ?? 0;
}

async function token(fake: LiveKitServerFake, identity: string, grant: VideoGrant): Promise<string> {
  const at = new AccessToken(fake.apiKey, fake.apiSecret, { identity, ttl: 600 });
  at.addGrant(grant);
  return at.toJwt();
}

/** Waits on the rooms and their media: polled every 25 ms, bounded at 30 s (a bound for a slow machine, not a timing goal). */
const ROOM_WAIT = { timeoutMs: 30_000, intervalMs: 25 } as const;

function tone(start: number, samples: number, rate: number, hz: number, amplitude: number): Int16Array {
  const out = new Int16Array(samples);
  for (let i = 0; i < samples; i++) out[i] = Math.round(amplitude * Math.sin((2 * Math.PI * hz * (start + i)) / rate));
  return out;
}

/** A visitor in the room: the real SDK publishing a microphone fed in real time (tone, then silence). */
async function visitor(fake: LiveKitServerFake, room: string, identity: string) {
  const lk = new Room();
  await lk.connect(fake.url, await token(fake, identity, { roomJoin: true, room, canPublish: true, canSubscribe: true, canPublishSources: [GrantSource.MICROPHONE] }), { autoSubscribe: true, dynacast: false });
  const source = new AudioSource(48_000, 1, 200);
  const track = LocalAudioTrack.createAudioTrack('microphone', source);
  await lk.localParticipant!.publishTrack(track, new TrackPublishOptions({ source: TrackSource.SOURCE_MICROPHONE }));
  let toneMs = 0;
  let sent = 0;
  let running = true;
  const received: Array<{ topic: string | undefined; text: string; from: string | undefined }> = [];
  lk.on(RoomEvent.DataReceived, (payload, participant, _kind, topic) => received.push({ topic, text: new TextDecoder().decode(payload), from: participant?.identity }));
  const pump = (async () => {
    const started = Date.now();
    while (running) {
      // 10 ms frames in real time, as a microphone delivers them.
      const n = 480;
      const loud = toneMs > 0;
      await source.captureFrame(new AudioFrame(loud ? tone(sent * n, n, 48_000, 440, 9000) : new Int16Array(n), 48_000, 1, n));
      if (loud) toneMs -= 10;
      sent++;
      const ahead = sent * 10 - (Date.now() - started);
      if (ahead > 0) await new Promise((resolve) => setTimeout(resolve, ahead));
    }
  })();
  return {
    lk,
    received,
    say(ms: number) {
      toneMs = ms;
    },
    async send(message: unknown, topic = LIVEKIT_SESSION_TOPIC) {
      const bytes = typeof message === 'string' ? new TextEncoder().encode(message) : new TextEncoder().encode(JSON.stringify(message));
      await lk.localParticipant!.publishData(bytes, { reliable: true, topic });
    },
    async leave() {
      running = false;
      await pump;
      await source.close();
      await lk.disconnect();
    },
  };
}

test.serial('the bot hears a visitor through the SFU as input-audio frames at the pipeline rate, and messages go both ways', async (t) => {
  const listenersBefore = ffiListeners();
  const fake = await startLiveKitServerFake();
  t.teardown(() => fake.close());
  const room = 'room-input-1';
  const bot = await LiveKitBotRoom.join({
    url: fake.url,
    token: await token(fake, `avatar-${room}`, { roomJoin: true, room, canPublish: true, canSubscribe: true, canPublishSources: [GrantSource.CAMERA, GrantSource.MICROPHONE] }),
    livekitAllowedRanges: LOOPBACK,
    audioSampleRate: 48_000, // read at 48 kHz: the input resamples to the pipeline's 16 kHz
  });
  t.teardown(() => bot.close());
  const events: RoomSubscriberEvent[] = [];
  const messages: RoomClientMessage[] = [];
  bot.subscriberEvents.subscribe((e) => events.push(e));
  bot.clientMessages.subscribe((m) => messages.push(m));

  const input = new LiveKitAudioInput(bot);
  const capture = new CaptureProcessor('downstream', new Set(['start', 'end', 'heartbeat']));
  const worker = new PipelineWorker(new Pipeline([input, capture]), { clock: new RealClock(), audioInSampleRate: 16_000, heartbeatMs: null, idleTimeoutMs: null });
  const run = worker.run();
  t.teardown(async () => {
    if (!worker.finished) await worker.cancel();
    await run;
  });

  const v = await visitor(fake, room, 'user-1');
  t.teardown(() => v.leave());
  await until(() => events.some((e) => e.type === 'joined' && e.participantId === 'user-1'), { ...ROOM_WAIT, what: 'the visitor joins' });
  await until(() => fake.participants.find((p) => p.identity === `avatar-${room}`)!.forwarded.length === 1, { ...ROOM_WAIT, what: 'the visitor microphone forwarded to the bot' });
  await until(() => events.some((e) => e.type === 'peer-state' && e.state === 'connected'), { ...ROOM_WAIT, what: 'the visitor reaches the bot' });

  const frames = () => capture.frames.filter((f): f is FrameOf<'input-audio'> => f.type === 'input-audio');
  await until(() => frames().length > 25, { ...ROOM_WAIT, what: 'silence frames from the visitor microphone' });
  const quietBefore = frames().length;
  v.say(1500);
  await until(() => frames().slice(quietBefore).filter((f) => rms(f.pcm) > 0.1).length >= 40, { ...ROOM_WAIT, what: 'the tone arrives as loud input-audio' });
  const all = frames();
  const chunk = (16_000 * ROOM_AUDIO_INPUT_DEFAULTS.chunkMs) / 1000;
  t.true(all.every((f) => f.sampleRate === 16_000 && f.channels === 1 && f.pcm.length === chunk), `frames of ${ROOM_AUDIO_INPUT_DEFAULTS.chunkMs} ms at the pipeline rate`);
  t.is(input.participantId, 'user-1');
  t.true(all.slice(0, quietBefore).every((f) => rms(f.pcm) < 0.01), 'the silence before is silent');
  // Pitch of the loudest stretch: 440 Hz survives the Opus round trip and the 48 -> 16 kHz resampling.
  const loud = all.slice(quietBefore).filter((f) => rms(f.pcm) > 0.1);
  const pcm = Int16Array.from(loud.slice(5, 35).flatMap((f) => [...f.pcm]));
  let crossings = 0;
  for (let i = 1; i < pcm.length; i++) if (pcm[i - 1]! < 0 && pcm[i]! >= 0) crossings++;
  const hz = crossings / (pcm.length / 16_000);
  t.true(Math.abs(hz - 440) < 15, `pitch ${hz.toFixed(1)} Hz`);
  t.true(input.stats.frames >= all.length);

  // Visitor -> bot: session messages on the session topic; the others are dropped, not thrown.
  await v.send({ type: 'client-ready', version: '1.0.0' });
  await v.send('not json');
  await v.send([1, 2, 3]);
  await v.send({ type: 'x', pad: 'y'.repeat(20_000) });
  await v.send({ type: 'other-app' }, 'chat');
  await v.send({ type: 'hang-up' });
  await until(() => messages.length >= 2, { ...ROOM_WAIT, what: 'the session messages' });
  await until(() => bot.stats.messagesDropped >= 4, { ...ROOM_WAIT, what: 'the refused packets counted' });
  t.deepEqual(messages, [
    { participantId: 'user-1', message: { type: 'client-ready', version: '1.0.0' } },
    { participantId: 'user-1', message: { type: 'hang-up' } },
  ]);
  t.is(bot.stats.messagesDropped, 4);

  // Bot -> visitor: a reliable packet on the session topic, from the bot.
  t.is(bot.sendMessage({ type: 'bot-ready', version: '1.0.0' }), 1);
  await until(() => v.received.length >= 1, { ...ROOM_WAIT, what: 'the bot message at the visitor' });
  t.deepEqual(v.received[0], { topic: LIVEKIT_SESSION_TOPIC, text: JSON.stringify({ type: 'bot-ready', version: '1.0.0' }), from: `avatar-${room}` });

  // The visitor leaves: presence says so.
  await v.leave();
  await until(() => events.some((e) => e.type === 'left' && e.participantId === 'user-1'), { ...ROOM_WAIT, what: 'the visitor leaves' });
  t.deepEqual(bot.subscribers(), []);
  await bot.close();
  t.true(bot.closed);
  t.is(bot.sendMessage({ type: 'late' }), 0, 'nothing is sent once closed');
  await until(() => fake.inRoom(room).length === 0, { ...ROOM_WAIT, what: 'the bot left the room' });
  // Nothing of either participant stays on the SDK's process-wide emitter.
  await until(() => ffiListeners() <= listenersBefore, { ...ROOM_WAIT, what: () => `the FFI listeners back to ${listenersBefore} (${ffiListeners()})` });
});

test.serial('a visitor already in the room when the bot joins is reported and heard; the bot leaving first ends its streams', async (t) => {
  const listenersBefore = ffiListeners();
  const fake = await startLiveKitServerFake();
  t.teardown(() => fake.close());
  const room = 'room-input-2';
  const v = await visitor(fake, room, 'user-early');
  t.teardown(() => v.leave());
  const bot = await LiveKitBotRoom.join({
    url: fake.url,
    token: await token(fake, `avatar-${room}`, { roomJoin: true, room, canPublish: true, canSubscribe: true }),
    livekitAllowedRanges: LOOPBACK,
  });
  t.teardown(() => bot.close());
  t.deepEqual(bot.subscribers().map((s) => s.participantId), ['user-early']);
  const heard: number[] = [];
  bot.participantAudio.subscribe((a) => {
    t.is(a.participantId, 'user-early');
    heard.push(a.sampleRate);
  });
  v.say(500);
  await until(() => heard.length > 20, { ...ROOM_WAIT, what: 'audio of the visitor who was there first' });
  t.true(heard.every((rate) => rate === 16_000), 'read at the default 16 kHz');
  await until(() => bot.subscribers()[0]?.peerState === 'connected', { ...ROOM_WAIT, what: 'connected once its microphone is subscribed' });

  // The bot leaves first (a session limit, say), then the visitor: every FFI listener of theirs
  // goes, the bot's microphone stream's included (its native side ends it with the room; the
  // bot also cancels it through its reader).
  const listenersWithBoth = ffiListeners();
  await bot.close();
  await v.leave();
  await until(() => ffiListeners() <= listenersBefore, { ...ROOM_WAIT, what: () => `the FFI listeners back to ${listenersBefore} (${ffiListeners()}, ${listenersWithBoth} with both in the room)` });
});

test.serial('the bot leaves on close and its room being deleted ends it', async (t) => {
  const fake = await startLiveKitServerFake();
  t.teardown(() => fake.close());
  const room = 'room-input-3';
  const bot = await LiveKitBotRoom.join({
    url: fake.url,
    token: await token(fake, `avatar-${room}`, { roomJoin: true, room, canPublish: true, canSubscribe: true }),
    livekitAllowedRanges: LOOPBACK,
  });
  t.teardown(() => bot.close());
  let completed = false;
  bot.subscriberEvents.subscribe({ complete: () => (completed = true) });
  t.is(await fake.deleteRoom(room), 1);
  await bot.ended;
  t.true(bot.closed);
  t.true(completed, 'presence completes when the bot is out');
});
