/**
 * What `npm start` says about speech providers at start-up (server/speech-providers.ts), with the
 * default plugins loaded as `npm start` loads them.
 */
import test from 'ava';
import { pino } from 'pino';
import { Registry } from '../../core/registry.ts';
import { loadDefaultPlugins } from '../../server/default-plugins.ts';
import { sttProviderFromEnv } from '../../server/config/env.ts';
import { speechProvidersReport } from '../../server/speech-providers.ts';

async function registry(): Promise<Registry> {
  const r = new Registry();
  await loadDefaultPlugins(r, pino({ level: 'silent' }));
  return r;
}

// The plugins read their keys from process.env when built; each case sets exactly its own.
const KEYS = ['DEEPGRAM_API_KEY', 'OPENAI_API_KEY', 'OPENAI_STT_API_KEY', 'OPENAI_TTS_API_KEY', 'OPENAI_BASE_URL', 'OPENAI_STT_BASE_URL', 'ELEVENLABS_API_KEY', 'CARTESIA_API_KEY', 'SVC_STT_PROVIDER', 'SVC_STT_MODEL'];
function withEnv<T>(env: Record<string, string>, run: () => T): T {
  const saved = Object.fromEntries(KEYS.map((k) => [k, process.env[k]]));
  for (const k of KEYS) delete process.env[k];
  Object.assign(process.env, env);
  try {
    return run();
  } finally {
    for (const k of KEYS) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  }
}

test.serial('no keys: offline speech-to-text; every cloud voice is shown as unable to start', async (t) => {
  const r = await registry();
  const report = withEnv({}, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.is(report.error, undefined);
  t.is(report.lines[0], '  Speech:     speech-to-text local (no cloud speech-to-text key)');
  t.regex(report.lines[1]!, /^ {2}Voices: {5}text-to-speech per agent \(tts_provider\): .*\blocal, /);
  for (const slug of ['openai', 'deepgram', 'cartesia', 'elevenlabs']) t.true(report.lines[1]!.includes(`${slug} (no key: agents using it fail to start, tts_key_missing)`), slug);
});

test.serial('an OpenAI key: speech-to-text openai by default, and the OpenAI voice can start', async (t) => {
  const r = await registry();
  const report = withEnv({ OPENAI_API_KEY: 'sk-test' }, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.is(report.lines[0], '  Speech:     speech-to-text openai (OPENAI_API_KEY is set)');
  t.true(report.lines[1]!.endsWith(', local, openai'), report.lines[1]);
  t.true(report.lines[1]!.includes('cartesia (no key'));
});

test.serial('SVC_STT_PROVIDER without the provider\'s key: npm start says every session will fail', async (t) => {
  const r = await registry();
  const report = withEnv({ SVC_STT_PROVIDER: 'deepgram' }, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.regex(report.lines[0]!, /^ {2}Speech: {5}speech-to-text deepgram \(SVC_STT_PROVIDER\) -- CANNOT START: no Deepgram API key.*every session will fail \(stt_key_missing\)$/);
});

test.serial('an SVC_STT_PROVIDER that is not installed is a configuration error', async (t) => {
  const r = await registry();
  const report = withEnv({ SVC_STT_PROVIDER: 'whisperx' }, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.is(report.error, 'SVC_STT_PROVIDER=whisperx is not an installed speech-to-text provider (installed: deepgram, local, moonshine, openai)');
});

test.serial('SVC_STT_PROVIDER=moonshine: the offline recogniser of open vocabulary, which needs no key', async (t) => {
  const r = await registry();
  const report = withEnv({ SVC_STT_PROVIDER: 'moonshine' }, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.is(report.error, undefined);
  t.is(report.lines[0], '  Speech:     speech-to-text moonshine (SVC_STT_PROVIDER)');
});

test.serial('SVC_STT_MODEL names the model in the start-up line; a model the provider refuses is a configuration error', async (t) => {
  const r = await registry();
  const report = withEnv({ SVC_STT_PROVIDER: 'moonshine', SVC_STT_MODEL: 'base' }, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.is(report.error, undefined);
  t.is(report.lines[0], '  Speech:     speech-to-text moonshine model base (SVC_STT_PROVIDER, SVC_STT_MODEL)');
  const refused = withEnv({ SVC_STT_PROVIDER: 'moonshine', SVC_STT_MODEL: 'large' }, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.regex(refused.error ?? '', /^SVC_STT_MODEL=large is refused by speech-to-text moonshine: model must be one of tiny, base, got "large"$/);
  // A cloud provider's model is the vendor's to check (its names change): it is passed as given.
  const cloud = withEnv({ DEEPGRAM_API_KEY: 'k', SVC_STT_MODEL: 'nova-3' }, () => speechProvidersReport(r, sttProviderFromEnv(process.env)));
  t.is(cloud.error, undefined);
  t.is(cloud.lines[0], '  Speech:     speech-to-text deepgram model nova-3 (DEEPGRAM_API_KEY is set, SVC_STT_MODEL)');
});
