import test from 'ava';
import { concat, Registry, RegistryError, silence, VirtualClock } from '../../core/index.ts';
import { Conversation } from '../../testing/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { buildAgentPipeline, createProvider, ProviderStartError, type AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { openaiPlugin } from '../../plugins/openai/index.ts';
import { ConfigError, providersFromEnv, sttProviderFromEnv } from '../../server/config/env.ts';
import { localPlugin, type MoonshineSTT } from '../../plugins/local/index.ts';
import { AGENT_DEFAULTS } from '../../server/services/agent-defaults.ts';
import { TURN_DEFAULTS } from '../../processors/turns/turn-processor.ts';
import { VAD_DEFAULTS } from '../../processors/vad/vad-processor.ts';
import { EnergyVAD, ScriptedLLM, ScriptedSTT, ToneTTS, speech, type ScriptedResponse } from '../processors/scripted-services.ts';

function agent(overrides: Partial<AgentRuntimeRecord> = {}): AgentRuntimeRecord {
  return {
    ...AGENT_DEFAULTS,
    agent_id: '7b0c0a8e-1111-4c4c-8888-000000000001',
    tts_provider: 'tone',
    tools: [],
    ...overrides,
    behaviour: { ...AGENT_DEFAULTS.behaviour, ...overrides.behaviour },
    advanced: { ...AGENT_DEFAULTS.advanced, ...overrides.advanced },
  } as AgentRuntimeRecord;
}

async function session(record: AgentRuntimeRecord, phrases: string[] = [], responses: ScriptedResponse[] = []) {
  const clock = new VirtualClock();
  const stt = new ScriptedSTT(clock, phrases, 100);
  const llm = new ScriptedLLM(clock, responses, 200, 10);
  const tts = new ToneTTS(clock, 50);
  // Stand-in providers registered through the plugin API, under their own slugs.
  const registry = new Registry();
  registry.register('stt', 'scripted', () => stt);
  registry.register('llm', 'scripted', () => llm);
  registry.register('tts', 'tone', () => tts);
  registry.register('vad', 'energy', () => new EnergyVAD());
  const sink = new MemoryMediaSink();
  const built = await buildAgentPipeline(record, {
    registry,
    sink,
    providers: { stt: 'scripted', llm: 'scripted', vad: 'energy' },
    session: { session_id: 's1', call_id: 'c1', client_user_ref: null },
    tuning: { vadOptions: { startMs: 100, stopMs: 300 } },
  });
  // The worker options carry behaviour.allow_interruption into the start frame, as the bot runner does.
  const c = await Conversation.start({ pipeline: built.pipeline, clock, worker: { ...built.workerOptions } });
  return { clock, stt, llm, tts, sink, built, worker: c.worker, say: (pcm: Int16Array) => c.say(pcm), outcome: () => c.outcome };
}

test('language, system prompt, voice and token limit reach STT, LLM and TTS', async (t) => {
  const s = await session(
    agent({ language: 'de', system_prompt: 'Du bist Ada.', voice_id: 'voice-42', advanced: { llm_max_tokens: 321 }, starts_conversation: false }),
    ['hallo'],
    ['Hallo! Wie kann ich helfen?'],
  );
  await s.say(concat([speech(500), silence(500, 16_000)]));
  await s.clock.advance(3000);
  t.is(s.stt.connections[0]!.options.language, 'de');
  const request = s.llm.requests[0]!;
  t.is(request.maxTokens, 321);
  t.regex(request.messages[0]!.content!, /^Du bist Ada\.\n\nAlways respond in German/);
  t.like(s.tts.requests[0], { voiceId: 'voice-42', language: 'de' });
  await s.worker.cancel();
});

test('starts_conversation with a verbatim greeting speaks it first; without, the agent waits', async (t) => {
  const greets = await session(agent({ starts_conversation: true, behaviour: { greeting: 'Welcome to Acme!', greeting_mode: 'verbatim' } }));
  await greets.clock.advance(1000);
  t.deepEqual(greets.tts.requests.map((r) => r.text), ['Welcome to Acme!']);
  await greets.worker.cancel();
  const waits = await session(agent({ starts_conversation: false, behaviour: { greeting: 'Welcome to Acme!' } }));
  await waits.clock.advance(1000);
  t.is(waits.tts.requests.length, 0);
  await waits.worker.cancel();
});

test('a generated greeting asks the model with the owner text and reference', async (t) => {
  const s = await session(agent({ behaviour: { greeting: 'Welcome', greeting_reference: 'mention the spring sale', greeting_mode: 'generated' } }), [], ['Hi, welcome to our spring sale!']);
  await s.clock.advance(2000);
  const instructions = s.llm.requests[0]!.messages.filter((m) => m.role === 'system').map((m) => m.content).join('\n');
  t.regex(instructions, /\[greeting\].*Welcome.*spring sale/);
  t.deepEqual(s.tts.requests.map((r) => r.text), ['Hi, welcome to our spring sale!']);
  await s.worker.cancel();
});

test('the inactivity nudge follows inactivity_nudge_seconds', async (t) => {
  const s = await session(agent({ starts_conversation: false, behaviour: { inactivity_nudge_seconds: 7, nudge_message: 'Still there?' } }));
  await s.clock.advance(6900);
  t.is(s.tts.requests.length, 0);
  await s.clock.advance(200);
  t.deepEqual(s.tts.requests.map((r) => r.text), ['Still there?']);
  await s.worker.cancel();
});

test('the shorter of max_conversation_duration_seconds and session_limit_seconds ends the call after the farewell', async (t) => {
  const s = await session(
    agent({ starts_conversation: false, session_limit_seconds: 5, behaviour: { max_conversation_duration_seconds: 60, farewell_message: 'Goodbye!' } }),
  );
  await s.clock.advanceUntil(() => s.outcome() !== undefined, 8000);
  t.deepEqual(s.outcome(), { how: 'ended', reason: 'max_duration' });
  t.true(s.clock.now() >= 5000);
  t.deepEqual(s.tts.requests.map((r) => r.text), ['Goodbye!']);
});

const LONG = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty.';

test('allow_interruption false: the bot is not cut and the user is answered after', async (t) => {
  const s = await session(
    agent({ starts_conversation: false, behaviour: { allow_interruption: false } }),
    ['first', 'second'],
    [LONG, 'Second answer.'],
  );
  await s.say(concat([speech(400), silence(400, 16_000)]));
  await s.clock.advanceUntil(() => s.built.output.botSpeaking, 3000);
  await s.say(concat([speech(300), silence(400, 16_000)]));
  t.true(s.built.output.botSpeaking, 'still speaking: not interrupted');
  await s.clock.advance(4000);
  t.deepEqual(
    s.built.context.messages().slice(1).map((m) => m.content),
    ['first', LONG, 'second', 'Second answer.'],
  );
  await s.worker.cancel();
});

test('tools: enabled tools reach the model with end_call; a third_party agent offers none', async (t) => {
  const tools = [
    { enabled: true, type: 'function' as const, function: { name: 'show_product', description: 'Shows a product', parameters: { type: 'object', properties: { sku: { type: 'string' } }, required: ['sku'], additionalProperties: false } }, delivery: { mode: 'client' as const } },
    { enabled: false, type: 'function' as const, function: { name: 'hidden_tool', parameters: {} }, delivery: { mode: 'client' as const } },
  ];
  const svc = await session(agent({ starts_conversation: false, tools }));
  t.deepEqual(svc.built.toolset.definitions.map((d) => d.name).sort(), ['end_call', 'show_product']);
  t.deepEqual(svc.built.context.tools.find((d) => d.name === 'show_product')?.parameters, {
    type: 'object',
    properties: { sku: { type: 'string' } },
    required: ['sku'],
  });
  await svc.worker.cancel();
  const sts = await session(agent({ mode: 'third_party', starts_conversation: false, tools }));
  t.deepEqual(sts.built.toolset.definitions, []);
  await sts.worker.cancel();
});

test('an unknown tts_provider fails clearly, naming the known providers', async (t) => {
  const err = await t.throwsAsync(() => session(agent({ tts_provider: 'nonexistent' })), { instanceOf: RegistryError });
  t.is(err?.message, 'no tts plugin named "nonexistent"; known tts plugins: tone');
});

test('providers come from the environment: cloud engines with keys, offline engines without', (t) => {
  t.deepEqual(providersFromEnv({}), { stt: 'local', llm: 'local', vad: 'local' });
  t.deepEqual(providersFromEnv({ DEEPGRAM_API_KEY: 'k', OPENAI_BASE_URL: 'http://llm.local/v1' }), { stt: 'deepgram', llm: 'openai', vad: 'local' });
});

test('the speech-to-text provider: SVC_STT_PROVIDER, else the first cloud key (Deepgram, then OpenAI), else local', (t) => {
  t.deepEqual(sttProviderFromEnv({}), { slug: 'local', reason: 'no cloud speech-to-text key' });
  t.deepEqual(sttProviderFromEnv({ SVC_STT_PROVIDER: ' OpenAI ', DEEPGRAM_API_KEY: 'k' }), { slug: 'openai', reason: 'SVC_STT_PROVIDER' });
  t.is(sttProviderFromEnv({ DEEPGRAM_API_KEY: 'k', OPENAI_API_KEY: 'sk' }).slug, 'deepgram');
  t.deepEqual(sttProviderFromEnv({ OPENAI_API_KEY: 'sk' }), { slug: 'openai', reason: 'OPENAI_API_KEY is set' });
  // A self-hosted language model's server is not assumed to transcribe...
  t.is(sttProviderFromEnv({ OPENAI_API_KEY: 'x', OPENAI_BASE_URL: 'http://vllm:8000/v1' }).slug, 'local');
  // ...a transcription server named for it is.
  t.deepEqual(sttProviderFromEnv({ OPENAI_API_KEY: 'x', OPENAI_BASE_URL: 'http://vllm:8000/v1', OPENAI_STT_BASE_URL: 'http://whisper:8000/v1' }), { slug: 'openai', reason: 'OPENAI_STT_BASE_URL is set' });
});

test('SVC_STT_MODEL: the deployment\'s speech-to-text model goes to its provider\'s options; local takes none; a malformed name is refused', (t) => {
  t.deepEqual(sttProviderFromEnv({ SVC_STT_PROVIDER: 'moonshine', SVC_STT_MODEL: ' base ' }), { slug: 'moonshine', reason: 'SVC_STT_PROVIDER', model: 'base' });
  t.deepEqual(providersFromEnv({ SVC_STT_PROVIDER: 'moonshine', SVC_STT_MODEL: 'base' }), { stt: 'moonshine', llm: 'local', vad: 'local', options: { 'stt:moonshine': { model: 'base' } } });
  t.deepEqual(providersFromEnv({ DEEPGRAM_API_KEY: 'k', SVC_STT_MODEL: 'nova-3' }).options, { 'stt:deepgram': { model: 'nova-3' } });
  t.deepEqual(providersFromEnv({ SVC_STT_MODEL: '  ', SVC_STT_PROVIDER: 'moonshine' }), { stt: 'moonshine', llm: 'local', vad: 'local' }, 'blank: the provider\'s default');
  t.throws(() => sttProviderFromEnv({ SVC_STT_MODEL: 'base' }), { instanceOf: ConfigError, message: /SVC_STT_MODEL=base .* the deployment's is local \(no cloud speech-to-text key\), which takes none/ });
  t.throws(() => sttProviderFromEnv({ SVC_STT_PROVIDER: 'moonshine', SVC_STT_MODEL: 'base; rm -rf' }), { instanceOf: ConfigError, message: /^SVC_STT_MODEL must be a model name/ });
  // The pipeline gives a provider its `kind:slug` options: the model reaches the engine.
  const registry = new Registry().use(localPlugin);
  const options = providersFromEnv({ SVC_STT_PROVIDER: 'moonshine', SVC_STT_MODEL: 'base' }).options!['stt:moonshine']!;
  t.is(createProvider<MoonshineSTT>(registry, 'stt', 'moonshine', { ...options }).settings.model, 'base');
  t.is(createProvider<MoonshineSTT>(registry, 'stt', 'moonshine', {}).settings.model, 'tiny');
});

test('a provider without its key fails the start with a ProviderStartError coded <kind>_key_missing', (t) => {
  const registry = new Registry().use(openaiPlugin);
  // The plugin reads its key from the environment when no option gives it: an empty apiKey stands for "none".
  const err = t.throws(() => createProvider(registry, 'tts', 'openai', { apiKey: '' }), { instanceOf: ProviderStartError });
  t.is(err!.code, 'tts_key_missing');
  t.regex(err!.message, /^text-to-speech provider openai cannot start: no OpenAI API key for text-to-speech/);
  const unknown = t.throws(() => createProvider(registry, 'tts', 'nope', {}));
  t.false(unknown instanceof ProviderStartError, 'an unknown slug stays the registry\'s error');
});

test('turn taking follows advanced: the VAD pause, the bounds, preemptive replies, false interruptions, backchannels; absent fields keep the defaults', async (t) => {
  const registry = new Registry();
  const clock = new VirtualClock();
  registry.register('stt', 'scripted', () => new ScriptedSTT(clock, []));
  registry.register('llm', 'scripted', () => new ScriptedLLM(clock, []));
  registry.register('tts', 'tone', () => new ToneTTS(clock));
  registry.register('vad', 'energy', () => new EnergyVAD());
  const build = (advanced: AgentRuntimeRecord['advanced']) =>
    buildAgentPipeline(agent({ advanced }), { registry, sink: new MemoryMediaSink(), providers: { stt: 'scripted', llm: 'scripted', vad: 'energy' }, session: { session_id: 's1', call_id: 'c1', client_user_ref: null } });
  const tuned = await build({ turn_pause_ms: 300, turn_unsure_ms: 900, turn_incomplete_ms: 2000, preemptive_generation: false, resume_false_interruptions: false, false_interruption_ms: 400, backchannel_words: ['si si'] });
  t.is(tuned.vad.settings.stopMs, 300);
  t.like(tuned.turns.settings, { unsureMs: 900, incompleteMs: 2000, preemptiveGeneration: false, resumeFalseInterruptions: false, falseInterruptionMs: 400, language: 'en' });
  t.deepEqual(tuned.turns.settings.backchannelWords, ['si si']);
  const plain = await build({});
  t.is(plain.vad.settings.stopMs, VAD_DEFAULTS.stopMs);
  t.deepEqual({ ...plain.turns.settings }, { ...TURN_DEFAULTS, language: 'en' });
});
