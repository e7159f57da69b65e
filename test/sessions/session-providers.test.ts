/**
 * The new speech providers end to end through the Session API, as a visitor lives a
 * conversation: a libwebrtc visitor connects over HTTP, hears the greeting (the offline phrase
 * recogniser finds its words in the audio received), sees the mouth move with it, asks a question
 * that the deployment's speech-to-text recognises and gets the answer as audio and transcript.
 *
 * - each new text-to-speech (`tts_provider` openai, deepgram, cartesia) with `stt:openai` in
 *   realtime mode, every vendor SDK pointed at its wire fake, the fakes speaking with the espeak
 *   voice (real speech the recogniser can find);
 * - `stt:openai` in batch mode (an OpenAI-compatible server with only /v1/audio/transcriptions);
 * - an agent whose provider has no key: the session start fails with `tts_key_missing`.
 *
 * The language model is the offline stand-in (it answers "What is your name?"). Real PostgreSQL,
 * the real face, real WebRTC.
 */
import test from 'ava';
import { concat } from '../../core/audio.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { cartesiaPlugin } from '../../plugins/cartesia/index.ts';
import { deepgramPlugin } from '../../plugins/deepgram/index.ts';
import { openaiPlugin } from '../../plugins/openai/index.ts';
import { RoomVisitor, waitFor } from '../agent/room-visitor.ts';
import { startCartesiaFake, type CartesiaFake } from '../fakes/cartesia.ts';
import { startDeepgramSpeakFake, type DeepgramSpeakFake } from '../fakes/deepgram-speak.ts';
import { startOpenAIAudioFake, type OpenAIAudioFake } from '../fakes/openai-audio.ts';
import { recognise, regionMotion, speech } from './conversation-audio.ts';
import { roomOf, startSessionServer, type SessionTestServer } from './session-harness.ts';

const GREETING = 'Welcome to the space station tour.';
const QUESTION = 'What is your name?';
const voice = new LocalTTSService();
let audio: OpenAIAudioFake;
let batchAudio: OpenAIAudioFake;
let deepgram: DeepgramSpeakFake;
let cartesia: CartesiaFake;
let realtime: SessionTestServer;
let batch: SessionTestServer;

test.before(async () => {
  await voice.warmUp();
  [audio, batchAudio, deepgram, cartesia] = await Promise.all([
    startOpenAIAudioFake({ voice: 'espeak', script: Array(20).fill(QUESTION) }),
    startOpenAIAudioFake({ voice: 'espeak', script: Array(20).fill(QUESTION) }),
    startDeepgramSpeakFake({ voice: 'espeak' }),
    startCartesiaFake({ voice: 'espeak' }),
  ]);
  const plugins = [openaiPlugin, deepgramPlugin, cartesiaPlugin];
  const runner = { tuning: { vadOptions: { stopMs: 500 } } };
  realtime = await startSessionServer('session_providers_rt', {
    plugins,
    sessions: {
      runner,
      providers: {
        stt: 'openai',
        llm: 'local',
        vad: 'local',
        options: {
          'stt:openai': { apiKey: audio.apiKey, baseUrl: audio.baseURL, mode: 'realtime' },
          'tts:openai': { apiKey: audio.apiKey, baseUrl: audio.baseURL },
          'tts:deepgram': { apiKey: deepgram.apiKey, baseUrl: deepgram.url },
          'tts:cartesia': { apiKey: cartesia.apiKey, baseUrl: cartesia.baseUrl, tls: { ca: cartesia.ca } },
        },
      },
    },
  });
  batch = await startSessionServer('session_providers_batch', {
    plugins,
    sessions: {
      runner,
      // No Cartesia key in this deployment (and none in the environment of the test run).
      providers: { stt: 'openai', llm: 'local', vad: 'local', options: { 'stt:openai': { apiKey: batchAudio.apiKey, baseUrl: batchAudio.baseURL, mode: 'batch' }, 'tts:cartesia': { apiKey: '' } } },
    },
  });
});

test.after.always(async () => {
  await realtime?.stop();
  await batch?.stop();
  await Promise.all([audio?.close(), batchAudio?.close(), deepgram?.close(), cartesia?.close()]);
});

/** A whole conversation with an agent of `ttsProvider` on server `s`; checks what a visitor sees and hears. */
async function converse(t: any, s: SessionTestServer, ttsProvider: string, voiceId: string | null): Promise<void> {
  const agentId = await s.agent({ tts_provider: ttsProvider, voice_id: voiceId, behaviour: { greeting: GREETING, greeting_mode: 'verbatim' }, starts_conversation: true });
  const res = await s.connect({ agent_id: agentId, client_user_ref: `visitor-${ttsProvider}` });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  const received: { at: number; pcm: Int16Array; rate: number }[] = [];
  const motion: { at: number; mouth: number }[] = [];
  let last: Uint8Array | null = null;
  visitor.onAudio = (samples, rate, channels, at) => received.push({ at, pcm: Int16Array.from(channels === 1 ? samples : samples.filter((_, i) => i % channels === 0)), rate });
  visitor.onVideoFrame = (frame, at) => {
    const luma = frame.data.subarray(0, frame.width * frame.height);
    if (last) motion.push({ at, mouth: regionMotion(last, luma, frame.width, frame.height, [0.4, 0.38, 0.5, 0.47]) });
    last = Uint8Array.from(luma);
  };
  try {
    t.true(await waitFor(() => visitor.connectionState === 'connected' && visitor.videoFrames > 10, 20_000), 'the idle face arrives');
    const readyAt = Date.now();
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    if (!(await waitFor(() => botTurns().length >= 1, 30_000))) {
      t.log(JSON.stringify(visitor.messages.map((m) => m.message)).slice(0, 3000));
      t.fail('the greeting turn ends');
      return;
    }
    t.is(botTurns()[0]!.text, GREETING);
    const greeting = received.filter((a) => a.at >= readyAt);
    t.deepEqual(await recognise(concat(greeting.map((a) => a.pcm)), greeting[0]!.rate, [GREETING, QUESTION, 'Tell me a joke', 'Goodbye']), [GREETING], `the greeting, spoken by ${ttsProvider}, is heard`);
    const idle = motion.filter((m) => m.at < readyAt);
    const speaking = motion.filter((m) => visitor.audioLevels.some((l) => Math.abs(l.at - m.at) < 40 && l.rms > 0.02));
    const mean = (xs: { mouth: number }[]) => xs.reduce((a, b) => a + b.mouth, 0) / Math.max(1, xs.length);
    t.true(idle.length > 5 && speaking.length > 5, `frames: ${idle.length} idle, ${speaking.length} speaking`);
    t.true(mean(speaking) > mean(idle) * 1.5, `the mouth moves with ${ttsProvider}'s speech: ${mean(speaking).toFixed(2)} vs idle ${mean(idle).toFixed(2)}`);

    const asked = Date.now();
    visitor.say(await speech(voice, QUESTION));
    t.true(await waitFor(() => botTurns().length >= 2, 30_000), 'the answer turn ends');
    t.like(visitor.ofType('transcript-turn').find((m) => m.owner === 'user'), { text: QUESTION, final: true });
    t.true(String(botTurns()[1]!.text).length > 0);
    t.true(visitor.audibleMs(asked + 500) > 300, 'the answer is heard');

    t.deepEqual((await s.release(roomOf(res.body.room_url))).body, { released: 1 });
    const call = await s.endedCallOf(agentId, res.body.session_id);
    t.like(call, { status: 'completed', termination_reason: 'client_released', failure_reason: null });
  } finally {
    visitor.close();
  }
}

test.serial('tts:openai (and stt:openai realtime): greeting heard, question recognised and answered, lip-synced face', async (t) => {
  await converse(t, realtime, 'openai', 'nova');
  t.true(audio.speech.some((r) => r.body.input === GREETING && r.body.voice === 'nova'), 'the greeting went to the speech endpoint with the agent voice');
  t.true(audio.sockets.some((s) => s.commits >= 1), 'the question went through a realtime transcription session');
});

test.serial('tts:deepgram (Aura): greeting heard, question recognised and answered, lip-synced face', async (t) => {
  await converse(t, realtime, 'deepgram', 'aura-2-orion-en');
  t.true(deepgram.connections.some((c) => c.query.model === 'aura-2-orion-en' && c.received.includes(`Speak:${GREETING}`)));
});

test.serial('tts:cartesia: greeting heard, question recognised and answered, lip-synced face', async (t) => {
  await converse(t, realtime, 'cartesia', null);
  t.true(cartesia.connections.some((c) => c.requests.some((r) => r.transcript === GREETING && r.add_phoneme_timestamps === true)));
});

test.serial('stt:openai in batch mode (a /v1/audio/transcriptions server): the question is recognised and answered', async (t) => {
  await converse(t, batch, 'local', null);
  t.true(batchAudio.transcriptions.some((r) => r.status === 200), 'the question went to /v1/audio/transcriptions');
  t.is(batchAudio.sockets.length, 0, 'no realtime session in batch mode');
});

test.serial('an agent whose provider has no key: the session start fails with failure_reason tts_key_missing', async (t) => {
  const agentId = await batch.agent({ tts_provider: 'cartesia' });
  const res = await batch.connect({ agent_id: agentId });
  t.not(res.status, 200);
  const calls = await batch.call('GET', `/v1/agents/${agentId}/calls?limit=10`);
  const call = calls.body.data[0];
  t.like(call, { status: 'failed', termination_reason: 'bot_start_failed', failure_reason: 'tts_key_missing' });
  t.regex(call.metadata.failure_detail, /text-to-speech provider cartesia cannot start: no Cartesia API key/);
});
