/**
 * The new speech providers end to end through the Session API, as a visitor lives a
 * conversation: a libwebrtc visitor connects over HTTP, hears the greeting (the offline phrase
 * recogniser finds its words in the audio received), sees the mouth move with it, asks a question
 * that the deployment's speech-to-text recognises and gets the answer as audio and transcript.
 *
 * - each new text-to-speech (`tts_provider` openai, deepgram, cartesia) with `stt:openai` in
 *   realtime mode, every vendor SDK pointed at its wire fake, the fakes speaking with the espeak
 *   voice (real speech the recogniser can find);
 * (`stt:openai` in batch mode and a provider without its key: session-stt-batch.test.ts.)
 *
 * The language model is the offline stand-in (it answers "What is your name?"). Real PostgreSQL,
 * the real face, real WebRTC.
 */
import test from 'ava';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { cartesiaPlugin } from '../../plugins/cartesia/index.ts';
import { deepgramPlugin } from '../../plugins/deepgram/index.ts';
import { openaiPlugin } from '../../plugins/openai/index.ts';
import { startCartesiaFake, type CartesiaFake } from '../fakes/cartesia.ts';
import { startDeepgramSpeakFake, type DeepgramSpeakFake } from '../fakes/deepgram-speak.ts';
import { startOpenAIAudioFake, type OpenAIAudioFake } from '../fakes/openai-audio.ts';
import { converse, GREETING, QUESTION } from './provider-conversation.ts';
import { startSessionServer, type SessionTestServer } from './session-harness.ts';
const voice = new LocalTTSService();
let audio: OpenAIAudioFake;
let deepgram: DeepgramSpeakFake;
let cartesia: CartesiaFake;
let realtime: SessionTestServer;

test.before(async () => {
  await voice.warmUp();
  [audio, deepgram, cartesia] = await Promise.all([
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
});

test.after.always(async () => {
  await realtime?.stop();
  await Promise.all([audio?.close(), deepgram?.close(), cartesia?.close()]);
});

test.serial('tts:openai (and stt:openai realtime): greeting heard, question recognised and answered, lip-synced face', async (t) => {
  await converse(t, realtime, voice, 'openai', 'nova');
  t.true(audio.speech.some((r) => r.body.input === GREETING && r.body.voice === 'nova'), 'the greeting went to the speech endpoint with the agent voice');
  t.true(audio.sockets.some((s) => s.commits >= 1), 'the question went through a realtime transcription session');
});

test.serial('tts:deepgram (Aura): greeting heard, question recognised and answered, lip-synced face', async (t) => {
  await converse(t, realtime, voice, 'deepgram', 'aura-2-orion-en');
  t.true(deepgram.connections.some((c) => c.query.model === 'aura-2-orion-en' && c.received.includes(`Speak:${GREETING}`)));
});

test.serial('tts:cartesia: greeting heard, question recognised and answered, lip-synced face', async (t) => {
  await converse(t, realtime, voice, 'cartesia', null);
  t.true(cartesia.connections.some((c) => c.requests.some((r) => r.transcript === GREETING && r.add_phoneme_timestamps === true)));
});
