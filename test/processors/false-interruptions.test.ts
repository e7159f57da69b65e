/**
 * Visitor sound over the bot, in the whole voice pipeline on the virtual clock: the bot pauses at
 * once; a backchannel (or no words) resumes it from the same sample, audio and face; real words
 * ("wait") end its turn with only the played words remembered.
 */
import test from 'ava';
import { concat, Registry, silence, VirtualClock, type Frame } from '../../core/index.ts';
import { Conversation } from '../../testing/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { createVoicePipeline, type VoicePipelineOptions } from '../../agent/voice-pipeline.ts';
import { AvatarProcessor } from '../../processors/avatar/avatar-processor.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { EnergyVAD, ScriptedLLM, ScriptedSTT, speech } from './scripted-services.ts';

const RATE = 16_000;
const ANSWER = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty.';

/**
 * A TTS whose samples never repeat (a counter), 100 ms per word with word timings: any sample
 * skipped or played twice shows in the output.
 */
class CountingTTS implements TTSService {
  readonly name = 'counting-tts';
  readonly made: Int16Array[] = [];
  private next = 1;
  constructor(private readonly clock: VirtualClock) {}
  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    await this.clock.sleep(20, request.signal);
    const words = request.text.split(/\s+/).filter(Boolean);
    const per = request.sampleRate / 10;
    yield { type: 'words', words: words.map((word, i) => ({ word, startMs: i * 100, endMs: (i + 1) * 100 })) };
    for (let w = 0; w < words.length; w++) {
      const pcm = new Int16Array(per);
      for (let i = 0; i < per; i++) pcm[i] = 1000 + (this.next++ % 30_000);
      this.made.push(pcm);
      yield { type: 'audio', pcm, sampleRate: request.sampleRate };
    }
  }
}

async function conversation(phrases: string[], extra: Partial<VoicePipelineOptions> = {}, realPauseMs = 0) {
  const clock = new VirtualClock();
  const sink = new MemoryMediaSink();
  const tts = new CountingTTS(clock);
  const llm = new ScriptedLLM(clock, [ANSWER, 'Sure, what is it?'], 50, 5);
  const voice = createVoicePipeline({ vad: new EnergyVAD(), stt: new ScriptedSTT(clock, phrases, 60), llm, tts, sink, language: 'en', vadOptions: { startMs: 100 }, ...extra });
  const c = await Conversation.start({ pipeline: voice.processors, clock, worker: { allowInterruptions: true }, realPauseMs });
  return { c, clock, sink, tts, llm, voice };
}
type Harness = Awaited<ReturnType<typeof conversation>>;

const loudAudio = (h: Harness) => concat(h.sink.audio.map((a) => a.pcm)).filter((x) => x !== 0);
const outcomes = (h: Harness) => h.c.framesFrom(h.voice.turns.name, 'bot-pause-ended') as Extract<Frame, { type: 'bot-pause-ended' }>[];

async function askAndWaitForSpeech(h: Harness): Promise<void> {
  await h.c.say(concat([speech(700), silence(300, RATE)]));
  await h.c.expect(() => h.voice.output.botSpeaking, 3000, 'the bot to speak');
  await h.c.advance(600);
}

test('a backchannel over the bot pauses it at once and resumes the same sentence from the same sample', async (t) => {
  const h = await conversation(['Tell me a story.', 'uh-huh']);
  await askAndWaitForSpeech(h);
  const before = h.sink.audio.length;
  await h.c.say(speech(140)); // the VAD needs 100 ms to call it speech
  t.true(h.voice.turns.botPaused, 'paused');
  const pausedAt = h.sink.audio.length;
  t.true(pausedAt - before <= 6, `${pausedAt - before} chunks written while the sound was checked (5 before the VAD decided)`);
  t.true(h.voice.output.botSpeaking, 'a pause is not the end of the turn');
  await h.c.say(silence(220, RATE));
  await h.c.advance(100);
  t.deepEqual(outcomes(h).map((o) => [o.outcome, o.reason, o.text]), [['resumed', 'backchannel', 'uh-huh']]);
  const resumedAt = h.sink.audio.length;
  t.true(resumedAt > pausedAt, 'playing again');
  await h.c.expect(() => !h.voice.output.botSpeaking, 5000, 'the answer to end');
  await h.c.advance(500);
  // Sample-exact: everything the TTS made was written once, in order, across the pause.
  const made = concat(h.tts.made);
  const played = loudAudio(h);
  t.is(played.length, made.length, 'nothing skipped or repeated');
  t.deepEqual(Array.from(played), Array.from(made));
  // The whole answer was said and remembered; the backchannel is no turn.
  t.deepEqual(h.voice.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content), [ANSWER]);
  t.deepEqual(h.voice.context.messages().filter((m) => m.role === 'user').map((m) => m.content), ['Tell me a story.']);
  t.is(h.llm.requests.length, 1);
  t.is(h.c.framesFrom(h.voice.output.name, 'bot-stopped-speaking').length, 1, 'one spoken turn, stopped once');
  await h.c.cancel();
});

test('sound without words resumes after the bound; real words ("wait") end the turn with only the played words remembered', async (t) => {
  // No words: a cough the STT makes nothing of.
  const quiet = await conversation(['Tell me a story.', '[noise]']);
  await askAndWaitForSpeech(quiet);
  await quiet.c.say(concat([speech(140), silence(300, RATE)]));
  t.true(quiet.voice.turns.botPaused, 'still waiting for words');
  await quiet.c.advance(600);
  t.deepEqual(outcomes(quiet).map((o) => [o.outcome, o.reason]), [['resumed', 'no_words']]);
  await quiet.c.expect(() => !quiet.voice.output.botSpeaking, 5000, 'the answer to end');
  t.deepEqual(Array.from(loudAudio(quiet)), Array.from(concat(quiet.tts.made)));
  await quiet.c.cancel();

  const h = await conversation(['Tell me a story.', 'wait']);
  await askAndWaitForSpeech(h);
  await h.c.say(speech(140));
  const pausedAt = h.sink.audio.length;
  await h.c.say(silence(300, RATE));
  t.deepEqual(outcomes(h).map((o) => [o.outcome, o.reason, o.text]), [['interrupted', 'words', 'wait']]);
  t.is(h.sink.audio.length, pausedAt, 'nothing more of the answer was played');
  t.is(h.c.framesFrom(h.voice.output.name, 'bot-stopped-speaking').length, 1, 'the turn ended');
  await h.c.advance(2000);
  const assistant = h.voice.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content ?? '');
  t.true(ANSWER.startsWith(assistant[0]!) && assistant[0]!.length < ANSWER.length, `only the played words: "${assistant[0]}"`);
  t.deepEqual(h.voice.context.messages().filter((m) => m.role === 'user').map((m) => m.content), ['Tell me a story.', 'wait']);
  t.is(h.llm.requests.length, 2, '"wait" was answered');
  await h.c.cancel();
});

test('long sound over the bot is a real interruption whatever its words', async (t) => {
  const h = await conversation(['Tell me a story.', '[noise]'], { turnOptions: { backchannelMaxMs: 600 } });
  await askAndWaitForSpeech(h);
  await h.c.say(speech(900));
  t.deepEqual(outcomes(h).map((o) => [o.outcome, o.reason]), [['interrupted', 'long_speech']]);
  t.true(h.voice.turns.userTurnOpen);
  await h.c.cancel();
});

test('with false-interruption resume off, sound over the bot cuts it as before', async (t) => {
  const h = await conversation(['Tell me a story.', 'uh-huh'], { turnOptions: { resumeFalseInterruptions: false } });
  await askAndWaitForSpeech(h);
  await h.c.say(speech(140));
  t.false(h.voice.output.botSpeaking, 'cut at once');
  t.is(outcomes(h).length, 0);
  await h.c.cancel();
});

test('with a face: the mouth stops and follows the audio again from the same sample after a backchannel', async (t) => {
  const face = new Registry().use(facePlugin).create<FaceModel>('face', 'human-portrait');
  const avatar = new AvatarProcessor((c) => face.openSession({ configuration: { width: 256, height: 144 }, imageFormat: 'rgb' }, c));
  const h = await conversation(['Tell me a story.', 'uh-huh'], { beforeOutput: avatar });
  // Opening the face takes real time: wait for its idle frames.
  const until = Date.now() + 30_000;
  while (h.sink.images.length === 0 && Date.now() < until) {
    await h.clock.advance(40);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await askAndWaitForSpeech(h);
  await h.c.say(concat([speech(140), silence(220, RATE)]));
  await h.c.advance(100);
  t.deepEqual(outcomes(h).map((o) => o.outcome), ['resumed']);
  const at = (type: string) => h.c.recorder.events.find((e) => e.source === h.voice.turns.name && e.frame.type === type)!.timestampMs;
  const pausedAt = at('bot-pause');
  const resumedAt = at('bot-pause-ended');
  await h.c.expect(() => !h.voice.output.botSpeaking, 6000, 'the answer to end');
  await h.c.advance(500);
  const images = h.c.framesFrom(avatar.name, 'output-image').map((f) => (f.type === 'output-image' ? f.frameType : ''));
  t.true(images.includes('speech'), 'the mouth moved');
  const speechAfterResume = h.c.recorder.events.filter((e) => e.source === avatar.name && e.frame.type === 'output-image' && e.frame.frameType === 'speech' && e.timestampMs > resumedAt);
  t.true(speechAfterResume.length > 10, `${speechAfterResume.length} speaking frames after the resume`);
  const speechDuringPause = h.c.recorder.events.filter((e) => e.source === avatar.name && e.frame.type === 'output-audio' && e.timestampMs > pausedAt + 40 && e.timestampMs < resumedAt && e.frame.pcm.some((x) => x !== 0));
  t.is(speechDuringPause.length, 0, 'no speech audio while paused');
  // Sample-exact through the face: the audio it played is the TTS's, once, in order.
  const faceAudio = concat(h.c.framesFrom(avatar.name, 'output-audio').map((f) => (f.type === 'output-audio' ? f.pcm : new Int16Array(0)))).filter((x) => x !== 0);
  t.deepEqual(Array.from(faceAudio), Array.from(concat(h.tts.made)));
  t.deepEqual(h.voice.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content), [ANSWER]);
  await h.c.cancel();
});
