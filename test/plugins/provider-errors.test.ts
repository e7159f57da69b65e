/**
 * One provider error: every vendor plugin's errors are `ProviderError`s, and the service
 * processors act on `code` and `retryable` (through instanceof) with one policy: a refused key
 * is fatal (the processor can no longer work), a failed request is not.
 */
import test from 'ava';
import { RealClock } from '../../core/clock.ts';
import { frame } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { ProviderError } from '../../core/provider-error.ts';
import { PipelineWorker, type WorkerOutcome } from '../../core/worker.ts';
import { LLMContext } from '../../processors/llm/context.ts';
import { LLMProcessor } from '../../processors/llm/llm-processor.ts';
import { providerFailure } from '../../processors/provider-failure.ts';
import { S2SError, type S2SErrorCode } from '../../processors/s2s/s2s-service.ts';
import type { FrameProcessor } from '../../core/processor.ts';
import type { LLMEvent, LLMService } from '../../processors/services.ts';
import { TTSProcessor } from '../../processors/tts/tts-processor.ts';
import { until } from '../../testing/until.ts';
import { DeepgramSTTError } from '../../plugins/deepgram/index.ts';
import { handshakeError } from '../../plugins/deepgram/errors.ts';
import { ElevenLabsTTSError, ElevenLabsTTSService } from '../../plugins/elevenlabs/index.ts';
import { LocalEngineError, LocalPhraseSTT } from '../../plugins/local/index.ts';
import { OpenAILLMError, OpenAILLMService } from '../../plugins/openai/index.ts';
import { startElevenLabsFake } from '../fakes/elevenlabs.ts';
import { startOpenAIFake } from '../fakes/openai.ts';

async function drain(iterable: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of iterable);
}

test('vendor errors are ProviderErrors: a refused key is not retryable, a dropped stream is (OpenAI, ElevenLabs wire fakes)', async (t) => {
  const openai = await startOpenAIFake({ dropAfterChunks: 2, replies: [{ text: 'an answer that the server cuts short' }] });
  t.teardown(() => openai.close());
  const wrongKey = await t.throwsAsync(drain(new OpenAILLMService({ apiKey: 'sk-wrong-key-123456', baseUrl: openai.baseURL }).stream({ messages: [{ role: 'user', content: 'hi' }] })));
  t.true(wrongKey instanceof OpenAILLMError && wrongKey instanceof ProviderError);
  t.like(wrongKey, { code: 'auth_failed', status: 401, retryable: false });
  const dropped = await t.throwsAsync(drain(new OpenAILLMService({ apiKey: openai.apiKey, baseUrl: openai.baseURL }).stream({ messages: [{ role: 'user', content: 'hi' }] })));
  t.true(dropped instanceof ProviderError);
  t.like(dropped, { code: 'connection_lost', retryable: true });

  const eleven = await startElevenLabsFake();
  t.teardown(() => eleven.close());
  const refused = await t.throwsAsync(drain(new ElevenLabsTTSService({ apiKey: 'wrong', baseUrl: eleven.baseUrl }).synthesize({ text: 'Hi', sampleRate: 16000 })));
  t.true(refused instanceof ElevenLabsTTSError && refused instanceof ProviderError);
  t.like(refused, { code: 'auth_failed', status: 401, retryable: false });
});

test('Deepgram handshake failures map to shared codes and retryability', (t) => {
  const cases: [string, string, boolean, number | undefined][] = [
    ['Unexpected server response: 401', 'auth_failed', false, 401],
    ['Unexpected server response: 400', 'bad_request', false, 400],
    ['Unexpected server response: 429', 'rate_limited', true, 429],
    ['Unexpected server response: 503', 'connect_failed', true, 503],
    ['TIMEOUT', 'timeout', true, undefined],
    ['connect ECONNREFUSED 127.0.0.1:1', 'connect_failed', true, undefined],
  ];
  for (const [message, code, retryable, status] of cases) {
    const err = handshakeError(message);
    t.true(err instanceof DeepgramSTTError && err instanceof ProviderError, message);
    t.like(err, { code, retryable, status }, message);
  }
});

test('offline engine and speech-to-speech errors are ProviderErrors too', async (t) => {
  const local = await t.throwsAsync(new LocalPhraseSTT().connect({ language: 'en', sampleRate: 16_000, channels: 2, interimResults: false }));
  t.true(local instanceof LocalEngineError && local instanceof ProviderError);
  t.like(local, { code: 'invalid_options', retryable: false });
  const permanent: S2SErrorCode[] = ['auth_failed', 'config_not_found', 'bad_config'];
  for (const code of ['auth_failed', 'config_not_found', 'bad_config', 'connect_failed', 'timeout', 'connection_lost', 'provider_error'] as S2SErrorCode[]) {
    const err = new S2SError(code, 'x');
    t.true(err instanceof ProviderError);
    t.is(err.retryable, !permanent.includes(code), code);
    t.is(err.permanent, !err.retryable);
  }
});

test('the failure policy: <kind>_<code>, fatal only when the key is refused; other errors are <kind>_error', (t) => {
  t.deepEqual(providerFailure('llm', new OpenAILLMError('auth_failed', 'bad key', 401)), { code: 'llm_auth_failed', fatal: true, message: 'bad key' });
  t.deepEqual(providerFailure('tts', new ElevenLabsTTSError('rate_limited', 'slow down', 429)), { code: 'tts_rate_limited', fatal: false, message: 'slow down' });
  // Duck-typed `.code` on a foreign error is not read: only ProviderErrors speak for a provider.
  const foreign = Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' });
  t.deepEqual(providerFailure('llm', foreign), { code: 'llm_error', fatal: false, message: 'ENOTFOUND' });
});

/** Runs `processors` on a worker as a bot would; collects error events and the outcome. */
function run(processors: FrameProcessor[]) {
  const worker = new PipelineWorker(new Pipeline(processors), { clock: new RealClock(), heartbeatMs: null, idleTimeoutMs: null });
  const errors: { code?: string; fatal: boolean }[] = [];
  worker.events$.subscribe((e) => {
    if (e.type === 'error') errors.push({ code: e.frame.code, fatal: e.frame.fatal });
  });
  let outcome: WorkerOutcome | undefined;
  const done = worker.run().then((o) => (outcome = o));
  return { worker, errors, done, outcome: () => outcome };
}

test('LLM processor: a refused key ends the pipeline (fatal llm_auth_failed); a cut stream only fails that answer', async (t) => {
  const fake = await startOpenAIFake({ replies: [{ text: 'First answer, cut short by the server.' }, { text: 'Second answer.' }] });
  t.teardown(() => fake.close());
  const ask = frame('llm-messages', { messages: [{ role: 'user', content: 'hi' }], mode: 'append', run: true });

  const refused = run([new LLMProcessor(new OpenAILLMService({ apiKey: 'sk-wrong-key-123456', baseUrl: fake.baseURL, maxRetries: 0 }), new LLMContext())]);
  refused.worker.queueFrame(ask);
  await refused.done;
  t.deepEqual(refused.errors, [{ code: 'llm_auth_failed', fatal: true }]);
  t.like(refused.outcome(), { how: 'cancelled' });
  t.regex(refused.outcome()!.reason ?? '', /^fatal error: language model openai failed: .*Incorrect API key/);

  fake.setFaults({ dropAfterChunks: 2 });
  const cut = run([new LLMProcessor(new OpenAILLMService({ apiKey: fake.apiKey, baseUrl: fake.baseURL, maxRetries: 0 }), new LLMContext())]);
  t.teardown(() => void cut.worker.cancel());
  cut.worker.queueFrame(ask);
  await until(() => cut.errors.length > 0, { what: 'the error', timeoutMs: 5_000, intervalMs: 5 });
  t.deepEqual(cut.errors, [{ code: 'llm_connection_lost', fatal: false }]);
  t.false(cut.worker.finished, 'the bot carries on: the next turn may work');
});

test('TTS processor: a refused key ends the pipeline (fatal tts_auth_failed)', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  const bot = run([new TTSProcessor(new ElevenLabsTTSService({ apiKey: 'wrong', baseUrl: fake.baseUrl }))]);
  bot.worker.queueFrame(frame('tts-speak', { text: 'Hello there.' }));
  await bot.done;
  t.deepEqual(bot.errors, [{ code: 'tts_auth_failed', fatal: true }]);
  t.like(bot.outcome(), { how: 'cancelled' });
});

test('a service failing with a plain Error is reported as <kind>_error and is not fatal', async (t) => {
  const broken: LLMService = {
    name: 'broken',
    async *stream(): AsyncIterable<LLMEvent> {
      throw new Error('unexpected');
    },
  };
  const bot = run([new LLMProcessor(broken, new LLMContext())]);
  t.teardown(() => void bot.worker.cancel());
  bot.worker.queueFrame(frame('llm-messages', { messages: [{ role: 'user', content: 'hi' }], mode: 'append', run: true }));
  await until(() => bot.errors.length > 0, { what: 'the error', timeoutMs: 5_000, intervalMs: 5 });
  t.deepEqual(bot.errors, [{ code: 'llm_error', fatal: false }]);
  t.false(bot.worker.finished);
});
