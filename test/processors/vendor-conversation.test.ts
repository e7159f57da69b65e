/**
 * Full conversations through the real vendor SDKs (Deepgram, OpenAI, ElevenLabs) against their
 * wire-level fakes, with speech made by the offline TTS. Time is virtual: the processors and the
 * fakes' latencies share one VirtualClock; between virtual steps the test yields a real
 * millisecond so loopback sockets can deliver.
 */
import test from 'ava';
import { concat, silence, VirtualClock } from '../../core/index.ts';
import { Conversation } from '../../testing/index.ts';
import { createVoicePipeline } from '../../agent/voice-pipeline.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { DeepgramSTTService } from '../../plugins/deepgram/index.ts';
import { OpenAILLMService } from '../../plugins/openai/llm.ts';
import { ElevenLabsTTSService } from '../../plugins/elevenlabs/tts.ts';
import { LocalTTSService } from '../../plugins/local/local-tts.ts';
import { WebRtcVADAnalyzer } from '../../plugins/local/webrtc-vad.ts';
import { startVendorFakes, type VendorFakesOptions } from '../fakes/index.ts';

const RATE = 16_000;
const localTts = new LocalTTSService();

async function speech(text: string): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of localTts.synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts);
}

async function setup(options: Omit<VendorFakesOptions, 'clock'>) {
  const clock = new VirtualClock();
  const fakes = await startVendorFakes({ ...options, clock });
  const sink = new MemoryMediaSink();
  const voice = createVoicePipeline({
    vad: new WebRtcVADAnalyzer(),
    stt: new DeepgramSTTService({ ...fakes.pluginOptions.stt, clock }),
    llm: new OpenAILLMService(fakes.pluginOptions.llm),
    tts: new ElevenLabsTTSService(fakes.pluginOptions.tts),
    sink,
    language: 'en',
    systemPrompt: 'You are a weather assistant.',
    vadOptions: { stopMs: 400 },
    sttOptions: { reconnectBaseMs: 50 },
  });
  // Real milliseconds between virtual steps let the loopback sockets to the fakes deliver.
  const c = await Conversation.start({ pipeline: voice.processors, clock, sampleRate: RATE, realPauseMs: 1 });
  const settle = (until: () => boolean, maxMs: number) => c.settle(until, maxMs);
  await settle(() => fakes.deepgram.connections.length > 0, 2000);
  return { clock, fakes, sink, voice, worker: c.worker, events: c.events, say: (pcm: Int16Array) => c.say(pcm), step: () => c.step(), settle };
}

test('a turn through Deepgram, OpenAI and ElevenLabs: speech in, an answer out, both sides in the context', async (t) => {
  const s = await setup({
    deepgram: { script: ['what is the weather in paris'], finalDelayMs: 150 },
    openai: { firstTokenDelayMs: 300, respond: () => ({ text: 'It is sunny in Paris. Enjoy your day!' }) },
    elevenlabs: { firstAudioDelayMs: 100 },
  });
  await s.say(concat([await speech('What is the weather in Paris?'), silence(600, RATE)]));
  t.true(await s.settle(() => s.voice.context.length >= 2 && !s.voice.output.botSpeaking, 20_000));
  const messages = s.voice.context.messages();
  t.regex(messages[0]!.content!, /weather assistant[\s\S]*Always respond in English/);
  t.deepEqual(messages.slice(1).map((m) => [m.role, m.content]), [
    ['user', 'what is the weather in paris'],
    ['assistant', 'It is sunny in Paris. Enjoy your day!'],
  ]);
  t.true(s.sink.audioMs > 1000, `${s.sink.audioMs} ms of answer audio`);
  t.deepEqual(s.fakes.elevenlabs.requests.map((r) => r.body.text), ['It is sunny in Paris.', 'Enjoy your day!']);
  const ttfb = s.events.flatMap((e) => (e.type === 'metrics' ? e.data.filter((d) => d.kind === 'ttfb').map((d) => d.processor) : []));
  t.true(ttfb.some((p) => p.startsWith('LLMProcessor')) && ttfb.some((p) => p.startsWith('TTSProcessor')), ttfb.join(','));
  await s.worker.cancel();
  await s.fakes.close();
});

test('a Deepgram disconnect mid-utterance: the STT reconnects, replays the audio and the turn is answered', async (t) => {
  const s = await setup({
    deepgram: { script: ['tell me the forecast'], finalDelayMs: 100 },
    openai: { respond: () => ({ text: 'Rain tomorrow.' }) },
  });
  const utterance = await speech('Tell me the forecast for tomorrow, please.');
  const half = Math.floor(utterance.length / 2);
  await s.say(utterance.subarray(0, half));
  s.fakes.deepgram.drop();
  await s.say(concat([utterance.subarray(half), silence(600, RATE)]));
  t.true(await s.settle(() => s.voice.context.length >= 2, 20_000));
  t.is(s.voice.stt.reconnects, 1);
  t.is(s.fakes.deepgram.connections.length, 2);
  t.deepEqual(s.voice.context.messages().slice(1).map((m) => m.content), ['tell me the forecast', 'Rain tomorrow.']);
  t.false(s.events.some((e) => e.type === 'error'), 'a recovered drop is not an error');
  await s.worker.cancel();
  await s.fakes.close();
});

test('barge-in over a streamed answer: playback stops, the context keeps only what was played', async (t) => {
  const long = 'Once upon a time there was a little cloud. It wandered over the hills. It met the wind. They played all day long. Then night came.';
  const s = await setup({
    deepgram: { script: ['tell me a story', 'stop please'] },
    openai: { replies: [{ text: long }, { text: 'Okay, I stopped.' }] },
  });
  await s.say(concat([await speech('Tell me a story.'), silence(600, RATE)]));
  t.true(await s.settle(() => s.voice.output.botSpeaking, 20_000));
  for (let i = 0; i < 75; i++) await s.step(); // about 1.5 s of the story
  const interruption = await speech('Stop, please.');
  await s.say(interruption.subarray(0, Math.floor(interruption.length / 2)));
  t.false(s.voice.output.botSpeaking, 'the bot went quiet while the user spoke');
  await s.say(concat([interruption.subarray(Math.floor(interruption.length / 2)), silence(600, RATE)]));
  t.true(await s.settle(() => s.voice.context.length >= 4 && !s.voice.output.botSpeaking, 20_000));
  const [, userStory, told, userStop, answer] = s.voice.context.messages().map((m) => m.content ?? '');
  t.is(userStory, 'tell me a story');
  t.true(long.startsWith(told!.replace(/\s+$/, '')), `"${told}" is a prefix of the story`);
  t.true(told!.length < long.length / 2, 'the unplayed part is not in the context');
  t.is(userStop, 'stop please');
  t.is(answer, 'Okay, I stopped.');
  await s.worker.cancel();
  await s.fakes.close();
});

test('an OpenAI stream and an ElevenLabs stream cut mid-answer: clear error frames, what was said is kept, the next turn is answered', async (t) => {
  const s = await setup({
    deepgram: { script: ['what is the weather', 'and tomorrow'] },
    openai: { replies: [{ text: 'It is sunny and warm in Paris today, with a light breeze.' }, { text: 'Rain tomorrow. Take an umbrella.' }] },
  });
  // The model's stream breaks after a few words; then the first sentence of the next answer
  // is cut by the TTS provider.
  s.fakes.openai.setFaults({ dropAfterChunks: 4 });
  await s.say(concat([await speech('What is the weather?'), silence(600, RATE)]));
  t.true(await s.settle(() => s.events.some((e) => e.type === 'error') && s.voice.context.length >= 2 && !s.voice.output.botSpeaking, 20_000));
  const llmError = s.events.find((e) => e.type === 'error');
  t.like(llmError?.type === 'error' ? llmError.frame : undefined, { code: 'llm_connection_lost', fatal: false });
  const [, , said] = s.voice.context.messages().map((m) => m.content ?? '');
  t.true('It is sunny and warm in Paris today, with a light breeze.'.startsWith(said!) && said!.length > 0, `"${said}" is what the model sent before the cut`);

  s.fakes.openai.setFaults({ dropAfterChunks: undefined });
  s.fakes.elevenlabs.setFaults({ dropAfterChunks: 1 });
  const spoken = s.fakes.elevenlabs.requests.length;
  await s.say(concat([await speech('And tomorrow?'), silence(600, RATE)]));
  t.true(await s.settle(() => s.fakes.elevenlabs.requests.length >= spoken + 1, 20_000));
  s.fakes.elevenlabs.setFaults({ dropAfterChunks: undefined });
  t.true(await s.settle(() => s.voice.context.length >= 4 && !s.voice.output.botSpeaking, 20_000));
  const ttsError = s.events.filter((e) => e.type === 'error').map((e) => (e.type === 'error' ? e.frame : undefined))[1];
  t.like(ttsError, { code: 'tts_connection_lost', fatal: false });
  t.regex(ttsError?.message ?? '', /text-to-speech .* failed on "Rain tomorrow\."/);
  const messages = s.voice.context.messages().slice(3).map((m) => [m.role, m.content]);
  t.deepEqual(messages[0], ['user', 'and tomorrow']);
  t.is(messages[1]![0], 'assistant');
  t.regex(messages[1]![1]!, /Take an umbrella\.$/, 'the sentence after the cut one was spoken');
  t.is(s.fakes.deepgram.connections.length, 1, 'speech-to-text was not disturbed');
  await s.worker.cancel();
  await s.fakes.close();
});
