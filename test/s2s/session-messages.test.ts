/**
 * The session message emitter (agent/session-messages.ts) on a third_party session, through the
 * taps `s2sSessionParts` gives the bot runner: the room's clients get the same messages as in
 * svc mode.
 */
import test, { type ExecutionContext } from 'ava';
import type { FrameObserver } from '../../core/index.ts';
import type { BotMessage } from '../../protocol/session-messages.ts';
import { SessionMessageEmitter } from '../../agent/session-messages.ts';
import { s2sSessionParts } from '../../agent/s2s-pipeline.ts';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { startOpenAIRealtimeFake, type OpenAIRealtimeFakeOptions } from '../fakes/openai-realtime.ts';
import { until } from '../../testing/until.ts';
import { agentRecord, startS2SSession, userUtterance, wait } from './harness.ts';

async function sessionWithMessages(t: ExecutionContext, options: OpenAIRealtimeFakeOptions, extra: { observers?: FrameObserver[]; withFace?: boolean } = {}) {
  const fake = await startOpenAIRealtimeFake(options);
  t.teardown(() => fake.close());
  const messages: BotMessage[] = [];
  let emitter: SessionMessageEmitter | undefined;
  const s = await startS2SSession(t, agentRecord(), {
    plugin: createOpenAIRealtimePlugin({ baseURL: fake.baseURL, tls: { ca: fake.ca } }),
    apiKey: fake.apiKey,
    observers: (built) => {
      const parts = s2sSessionParts(built);
      emitter = new SessionMessageEmitter({ send: (m) => messages.push(m), taps: parts.taps, userId: () => 'visitor-1', vadStopMs: parts.vadStopMs });
      return [emitter, ...(extra.observers ?? [])];
    },
    onMessage: (m) => emitter?.fromPipeline(m),
    withFace: extra.withFace,
  });
  await until(() => s.built.s2s.live !== undefined, { timeoutMs: 10_000, what: 'the provider connection to be live' });
  return { s, messages, fake };
}

const ofType = <T extends BotMessage['type']>(messages: BotMessage[], type: T) => messages.filter((m): m is Extract<BotMessage, { type: T }> => m.type === type);

test.serial('a turn: speaking state, user transcription and transcript turn, bot text, bot output as played, the end of the spoken turn, a latency report', async (t) => {
  const { s, messages } = await sessionWithMessages(t, { replies: ['Sunny and warm all day'], userTranscripts: ['what is the weather'] });
  s.say(userUtterance(400, 700));
  await until(() => messages.some((m) => m.type === 'bot-tts-stopped'), { timeoutMs: 10_000, what: 'the bot-tts-stopped message' });
  const types = messages.map((m) => m.type);
  for (const type of ['user-started-speaking', 'user-stopped-speaking', 'user-transcription', 'transcript-turn', 'bot-llm-text', 'bot-started-speaking', 'bot-output', 'bot-stopped-speaking', 'bot-tts-stopped', 'latency-report'] as const) {
    t.true(types.includes(type), type);
  }
  t.like(ofType(messages, 'user-transcription').find((m) => m.final), { text: 'what is the weather', user_id: 'visitor-1' });
  t.like(ofType(messages, 'transcript-turn')[0], { owner: 'user', text: 'what is the weather', turn_id: 1 });
  t.is(ofType(messages, 'bot-output').at(-1)!.text, 'Sunny and warm all day');
  t.true(types.indexOf('bot-output') < types.indexOf('bot-tts-stopped'), 'the words arrive while the turn plays');
  t.deepEqual(ofType(messages, 'bot-tts-stopped'), [{ type: 'bot-tts-stopped', interrupted: false }]);
  const states = ofType(messages, 'bot-state').map((m) => m.state);
  t.true(states.includes('speaking') && states.at(-1) === 'listening', states.join(' '));
  const report = ofType(messages, 'latency-report')[0]!;
  t.true(report.user_stopped_to_bot_audio_ms > 0);
  t.not(report.stages.avatar_ms, null, 'first provider audio -> first face audio is reported');
  await s.worker.end();
});

test.serial('a barge-in: the spoken turn ends interrupted, the bot output holds only the words played', async (t) => {
  const long = Array.from({ length: 14 }, (_, i) => `sentence${i} word`).join(' ');
  const { s, messages } = await sessionWithMessages(t, { replies: [long, 'Okay'], audioChunkMs: 100, deltaIntervalMs: 60 });
  s.say(userUtterance(300, 600));
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to start speaking' });
  await wait(1_000);
  await s.sayRealtime(userUtterance(200, 700));
  await until(() => ofType(messages, 'bot-tts-stopped').length >= 1, { timeoutMs: 5_000, what: 'the bot-tts-stopped message' });
  t.deepEqual(ofType(messages, 'bot-tts-stopped')[0], { type: 'bot-tts-stopped', interrupted: true });
  // The cut turn's last bot-output comes before its bot-tts-stopped (the next answer may already
  // be playing by the time this runs).
  const stoppedAt = messages.findIndex((m) => m.type === 'bot-tts-stopped');
  const outputs = ofType(messages.slice(0, stoppedAt), 'bot-output');
  const cut = outputs.at(-1)!.text.split(' ');
  t.true(cut.length > 0 && cut.length < long.split(' ').length, `${cut.length} words`);
  t.deepEqual(cut, long.split(' ').slice(0, cut.length));
  await s.worker.end();
});

/** Blocks the event loop for `ms` (a loaded machine's stall: timers run late, then all at once). */
function stallEventLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy: nothing else runs
  }
}

test.serial('a stalled event loop during a turn (a loaded machine): the transcript turn still holds every word played, the last included', async (t) => {
  const reply = 'Welcome aboard, I am Ada.';
  let stalled = false;
  const stall: FrameObserver = {
    onFramePushed(e) {
      // Once, on the turn's first speech frame: the face then catches up with a burst of frames
      // (its last ones and the held `tts-stopped` among them) while the output, paced at real
      // time, works through them behind. Words reported from the head of the pipeline as the
      // output plays would now queue behind the turn's end: only words carried in-band make it.
      if (stalled || e.direction !== 'downstream' || e.frame.type !== 'output-audio') return;
      stalled = true;
      stallEventLoop(600);
    },
  };
  const { s, messages } = await sessionWithMessages(t, { replies: [reply], userTranscripts: ['who are you'] }, { observers: [stall] });
  s.say(userUtterance(400, 700));
  await until(() => ofType(messages, 'transcript-turn').some((m) => m.owner === 'bot'), { timeoutMs: 10_000, what: 'the bot\'s transcript turn' });
  t.true(stalled);
  t.is(ofType(messages, 'transcript-turn').find((m) => m.owner === 'bot')!.text, reply);
  t.is(ofType(messages, 'bot-output').at(-1)!.text, reply);
  await s.worker.end();
});

test.serial('without a face: the transcript turn holds the whole answer, its words before the end of the spoken turn', async (t) => {
  const reply = 'Sunny and warm all day.';
  const { s, messages } = await sessionWithMessages(t, { replies: [reply], userTranscripts: ['what is the weather'] }, { withFace: false });
  s.say(userUtterance(400, 700));
  await until(() => ofType(messages, 'bot-tts-stopped').length >= 1, { timeoutMs: 10_000, what: 'the bot-tts-stopped message' });
  const types = messages.map((m) => m.type);
  t.true(types.indexOf('bot-output') >= 0 && types.indexOf('bot-output') < types.indexOf('bot-tts-stopped'), types.join(' '));
  t.like(ofType(messages, 'transcript-turn').find((m) => m.owner === 'bot'), { text: reply, turn_id: 1 });
  await s.worker.end();
});
