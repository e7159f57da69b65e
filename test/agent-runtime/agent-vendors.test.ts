/**
 * Agent sessions built by the agent runtime from Agent records, with the cloud plugins
 * (Deepgram, OpenAI, ElevenLabs) registered as the service registers them and pointed at their
 * wire-level fakes: each Agent field must be visible on the wire. Speech is made by the offline
 * TTS; time is virtual, with a real millisecond between steps for the loopback sockets.
 */
import test from 'ava';
import { concat, Registry, silence, VirtualClock } from '../../core/index.ts';
import { Conversation } from '../../testing/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { buildAgentPipeline, type AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { AGENT_DEFAULTS } from '../../server/services/agent-defaults.ts';
import { deepgramPlugin } from '../../plugins/deepgram/index.ts';
import { openaiPlugin } from '../../plugins/openai/index.ts';
import { elevenlabsPlugin } from '../../plugins/elevenlabs/index.ts';
import { localPlugin, LocalTTSService } from '../../plugins/local/index.ts';
import { startVendorFakes, type VendorFakesOptions } from '../fakes/index.ts';

const RATE = 16_000;
const voice = new LocalTTSService();

async function speech(text: string, language: string): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of voice.synthesize({ text, language, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  return concat([...parts, silence(700, RATE)]);
}

function agent(overrides: Partial<AgentRuntimeRecord>): AgentRuntimeRecord {
  return {
    ...AGENT_DEFAULTS,
    agent_id: '7b0c0a8e-1111-4c4c-8888-000000000002',
    tools: [],
    ...overrides,
    behaviour: { ...AGENT_DEFAULTS.behaviour, ...overrides.behaviour },
    advanced: { ...AGENT_DEFAULTS.advanced, ...overrides.advanced },
  } as AgentRuntimeRecord;
}

async function session(record: AgentRuntimeRecord, fakeOptions: Omit<VendorFakesOptions, 'clock'>) {
  const clock = new VirtualClock();
  const fakes = await startVendorFakes({ ...fakeOptions, clock });
  const registry = new Registry().use(localPlugin).use(deepgramPlugin).use(openaiPlugin).use(elevenlabsPlugin);
  const sink = new MemoryMediaSink();
  const built = await buildAgentPipeline(record, {
    registry,
    sink,
    providers: {
      stt: 'deepgram',
      llm: 'openai',
      vad: 'local',
      options: { 'stt:deepgram': { ...fakes.pluginOptions.stt, clock }, 'llm:openai': fakes.pluginOptions.llm, 'tts:elevenlabs': fakes.pluginOptions.tts },
    },
    session: { session_id: 's1', call_id: 'c1', client_user_ref: null },
    tuning: { vadOptions: { stopMs: 400 } },
  });
  // Real milliseconds between virtual steps let the loopback sockets to the fakes deliver.
  const c = await Conversation.start({ pipeline: built.pipeline, clock, sampleRate: RATE, realPauseMs: 1, worker: { ...built.workerOptions } });
  const settle = (until: () => boolean, maxMs: number) => c.settle(until, maxMs);
  await settle(() => fakes.deepgram.connections.length > 0, 2000);
  return { clock, fakes, sink, built, worker: c.worker, say: (pcm: Int16Array) => c.say(pcm), settle, outcome: () => c.outcome };
}

test('a French agent: language, system prompt, voice, token limit and greeting reach Deepgram, OpenAI and ElevenLabs', async (t) => {
  const s = await session(
    agent({
      language: 'fr',
      system_prompt: 'Tu es Ada, guide du musée.',
      tts_provider: 'elevenlabs',
      voice_id: 'voix-ada-fr',
      starts_conversation: true,
      behaviour: { greeting: 'Bonjour, je suis Ada.', greeting_mode: 'verbatim' },
      advanced: { llm_max_tokens: 64 },
    }),
    { deepgram: { script: ['où est la joconde'] }, openai: { respond: () => ({ text: 'Elle est au premier étage. Suivez-moi !' }) } },
  );
  t.true(await s.settle(() => s.built.context.length >= 1 && !s.built.output.botSpeaking, 10_000), 'the greeting was played');
  await s.say(await speech('Où est la Joconde ?', 'fr'));
  t.true(await s.settle(() => s.built.context.length >= 3 && !s.built.output.botSpeaking, 20_000));

  t.is(s.fakes.deepgram.connections[0]!.query.language, 'fr', 'Deepgram listens in French');
  const chat = s.fakes.openai.requests[0]!.body as { messages: Array<{ role: string; content: string }>; max_tokens?: number };
  t.regex(chat.messages[0]!.content, /^Tu es Ada, guide du musée\.\n\nAlways respond in French \(language code "fr"\)/);
  t.is(chat.max_tokens, 64, 'advanced.llm_max_tokens');
  const tts = s.fakes.elevenlabs.requests;
  t.deepEqual(tts.map((r) => r.body.text), ['Bonjour, je suis Ada.', 'Elle est au premier étage.', 'Suivez-moi !']);
  t.true(tts.every((r) => r.voiceId === 'voix-ada-fr' && r.body.language_code === 'fr'), 'voice_id and language on every request');
  t.deepEqual(s.built.context.messages().slice(1).map((m) => [m.role, m.content]), [
    ['assistant', 'Bonjour, je suis Ada.'],
    ['user', 'où est la joconde'],
    ['assistant', 'Elle est au premier étage. Suivez-moi !'],
  ]);
  await s.worker.cancel();
  await s.fakes.close();
});

test('nudge, then the duration limit: the verbatim nudge and the generated farewell are spoken, then the call ends', async (t) => {
  const s = await session(
    agent({
      tts_provider: 'elevenlabs',
      starts_conversation: false,
      behaviour: {
        inactivity_nudge_seconds: 2,
        nudge_message: 'Are you still there?',
        farewell_message: 'Thanks for visiting',
        farewell_reference: 'mention the gift shop',
        farewell_mode: 'generated',
        max_conversation_duration_seconds: 6,
      },
    }),
    { openai: { respond: () => ({ text: 'Thanks for visiting, and do stop by the gift shop!' }) } },
  );
  t.true(await s.settle(() => s.outcome() !== undefined, 12_000));
  t.deepEqual(s.outcome(), { how: 'ended', reason: 'max_duration' });
  t.deepEqual(s.fakes.elevenlabs.requests.map((r) => r.body.text), ['Are you still there?', 'Thanks for visiting, and do stop by the gift shop!']);
  const farewell = (s.fakes.openai.requests[0]!.body as { messages: Array<{ role: string; content: string }> }).messages.at(-1)!;
  t.is(farewell.role, 'system');
  t.regex(farewell.content, /^\[farewell\].*Thanks for visiting.*gift shop/);
  t.true(s.sink.audioMs > 2000, 'the farewell was played before the end');
  await s.fakes.close();
});

test('allow_interruption false: the worker is told too, and speech over the bot is answered after it', async (t) => {
  const long = 'Our museum has three floors, twelve rooms and a garden, and every room has a story to tell you today.';
  const s = await session(agent({ tts_provider: 'elevenlabs', starts_conversation: false, behaviour: { allow_interruption: false } }), {
    deepgram: { script: ['tell me about the museum', 'where is the exit'] },
    openai: { replies: [{ text: long }, { text: 'The exit is behind you.' }] },
  });
  t.deepEqual(s.built.workerOptions, { allowInterruptions: false });
  await s.say(await speech('Tell me about the museum.', 'en'));
  t.true(await s.settle(() => s.built.output.botSpeaking, 20_000));
  await s.say(await speech('Where is the exit?', 'en'));
  t.true(s.built.output.botSpeaking, 'not cut');
  t.true(await s.settle(() => s.built.context.length >= 4 && !s.built.output.botSpeaking, 30_000));
  t.deepEqual(s.built.context.messages().slice(1).map((m) => m.content), ['tell me about the museum', long, 'where is the exit', 'The exit is behind you.']);
  await s.worker.cancel();
  await s.fakes.close();
});
