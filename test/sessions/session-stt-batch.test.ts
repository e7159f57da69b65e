/**
 * `stt:openai` in batch mode end to end through the Session API (an OpenAI-compatible server that
 * only offers /v1/audio/transcriptions, the utterance cut at the VAD's stop), with a libwebrtc
 * visitor: greeting heard, question recognised and answered, lip-synced face; and an agent whose
 * voice provider has no key in this deployment: the session start fails with `tts_key_missing`.
 */
import test from 'ava';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { cartesiaPlugin } from '../../plugins/cartesia/index.ts';
import { openaiPlugin } from '../../plugins/openai/index.ts';
import { startOpenAIAudioFake, type OpenAIAudioFake } from '../fakes/openai-audio.ts';
import { converse, QUESTION } from './provider-conversation.ts';
import { startSessionServer, type SessionTestServer } from './session-harness.ts';

const voice = new LocalTTSService();
let audio: OpenAIAudioFake;
let s: SessionTestServer;

test.before(async () => {
  await voice.warmUp();
  audio = await startOpenAIAudioFake({ script: Array(20).fill(QUESTION) });
  s = await startSessionServer('session_stt_batch', {
    plugins: [openaiPlugin, cartesiaPlugin],
    sessions: {
      runner: { tuning: { vadOptions: { stopMs: 500 } } },
      // No Cartesia key in this deployment: an empty apiKey stands for none, whatever the environment holds.
      providers: { stt: 'openai', llm: 'local', vad: 'local', options: { 'stt:openai': { apiKey: audio.apiKey, baseUrl: audio.baseURL, mode: 'batch' }, 'tts:cartesia': { apiKey: '' } } },
    },
  });
});

test.after.always(async () => {
  await s?.stop();
  await audio?.close();
});

test.serial('stt:openai in batch mode (a /v1/audio/transcriptions server): greeting heard, the question recognised and answered', async (t) => {
  await converse(t, s, voice, 'local', null);
  t.true(audio.transcriptions.some((r) => r.status === 200), 'the question went to /v1/audio/transcriptions');
  t.is(audio.sockets.length, 0, 'no realtime session in batch mode');
});

test.serial('an agent whose voice provider has no key: the session start fails with failure_reason tts_key_missing', async (t) => {
  const agentId = await s.agent({ tts_provider: 'cartesia' });
  const res = await s.connect({ agent_id: agentId });
  t.not(res.status, 200);
  const calls = await s.call('GET', `/v1/agents/${agentId}/calls?limit=10`);
  t.like(calls.body.data[0], { status: 'failed', termination_reason: 'bot_start_failed', failure_reason: 'tts_key_missing' });
  t.regex(calls.body.data[0].metadata.failure_detail, /text-to-speech provider cartesia cannot start: no Cartesia API key/);
});
