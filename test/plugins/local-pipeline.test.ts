/**
 * The product with no cloud key: every engine of the voice pipeline is an offline one
 * (tts/stt/vad/llm `local`). The user's speech is made by the offline TTS, as in demos.
 */
import test from 'ava';
import { concat, rms, silence, VirtualClock, type Frame } from '../../core/index.ts';
import { Conversation } from '../../testing/index.ts';
import { createVoicePipeline } from '../../agent/voice-pipeline.ts';
import type { BehaviourOptions } from '../../processors/behaviours/conversation-behaviours.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import type { TTSService } from '../../processors/services.ts';
import { LocalPhraseSTT, LocalResponder, LocalTTSService, WebRtcVADAnalyzer } from '../../plugins/local/index.ts';

const RATE = 16_000;

async function offlineConversation(language: string, behaviours: BehaviourOptions) {
  const clock = new VirtualClock();
  const sink = new MemoryMediaSink();
  const tts = new LocalTTSService();
  await tts.warmUp();
  const stt = new LocalPhraseSTT();
  await stt.recogniserFor(language).ready();
  // Counts syntheses in flight (delegating to the real engine) so virtual time can wait for the
  // espeak worker, which runs in real time.
  let synthesising = 0;
  const countedTts: TTSService = {
    name: tts.name,
    async *synthesize(request) {
      synthesising++;
      try {
        yield* tts.synthesize(request);
      } finally {
        synthesising--;
      }
    },
  };
  const voice = createVoicePipeline({
    vad: new WebRtcVADAnalyzer(),
    stt,
    llm: new LocalResponder(),
    tts: countedTts,
    sink,
    language,
    systemPrompt: 'You are Ada.',
    behaviours,
  });
  // The espeak worker runs in real time: while a synthesis is in flight, virtual time waits
  // for it (up to 200 real ms a step), so the output never runs dry because of the test's clock.
  const c = await Conversation.start({ pipeline: voice.processors, clock, sampleRate: RATE, realPauseMs: 1, busy: () => synthesising > 0, worker: { allowInterruptions: true } });
  const worker = c.worker;
  /** Advances virtual time until `done` holds with the bot silent for `silentForMs`. */
  const until = async (done: () => boolean, maxMs: number, silentForMs = 600) => {
    let quietMs = -20; // becomes 0 at the first step where `done` holds
    for (let ms = 0; ms < maxMs && quietMs < silentForMs; ms += 20) {
      await c.step(20);
      quietMs = done() && (silentForMs === 0 || !voice.output.botSpeaking) ? quietMs + 20 : -20;
    }
    return quietMs >= silentForMs;
  };
  const say = async (text: string, pauseMs = 1200) => {
    const parts: Int16Array[] = [];
    for await (const e of tts.synthesize({ text, language, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
    await c.say(concat([...parts, silence(pauseMs, RATE)]));
  };
  const turns = () => voice.context.messages().filter((m) => m.role === 'user' || m.role === 'assistant').map((m) => `${m.role}: ${m.content}`);
  /** Frames of a type as the TTS processor pushed them (the observer sees every hop). */
  const fromTts = (type: Frame['type']) => c.recorder.events.filter((e) => e.frame.type === type && e.source === voice.tts.name).map((e) => e.frame);
  /** The STT's final transcripts, in order. */
  const finals = () => c.recorder.events.filter((e) => e.frame.type === 'transcription' && e.source === voice.stt.name && e.frame.final).map((e) => (e.frame as Extract<Frame, { type: 'transcription' }>).text);
  /** Each end of the user's turn (downstream, once however many links it crossed): its decision and delay. */
  const decisions = () => [...new Set(c.recorder.events.filter((e) => e.frame.type === 'user-stopped-speaking' && e.direction === 'downstream').map((e) => e.frame))].map((f) => `${(f as Extract<Frame, { type: 'user-stopped-speaking' }>).decision} after ${(f as Extract<Frame, { type: 'user-stopped-speaking' }>).endOfTurnMs} ms`);
  return { clock, sink, voice, worker, until, say, turns, fromTts, finals, decisions };
}

test('an English conversation runs end to end on the offline engines', async (t) => {
  const c = await offlineConversation('en', { startsConversation: true, greeting: { mode: 'generated' } });
  t.true(await c.until(() => c.turns().length >= 1, 20_000), 'the generated greeting is played');
  t.deepEqual(c.turns(), ['assistant: Hello! I am Ada, an offline stand-in assistant. How can I help you today?']);

  await c.say('What can you do?');
  t.true(await c.until(() => c.turns().length >= 3, 30_000), c.turns().join(' | '));
  t.is(c.turns()[1], 'user: What can you do?');
  t.regex(c.turns()[2]!, /^assistant: I am an offline stand-in, so I can greet you/);

  t.true(c.sink.audioMs > 5000, `${c.sink.audioMs} ms of speech written`);
  t.true(rms(concat(c.sink.audio.map((a) => a.pcm))) > 0.02, 'the output is audible');
  const audioFrames = c.fromTts('tts-audio').filter((f) => f.type === 'tts-audio');
  const phonemes = audioFrames.flatMap((f) => (f.type === 'tts-audio' ? f.phonemes ?? [] : []));
  const words = audioFrames.flatMap((f) => (f.type === 'tts-audio' ? (f.words ?? []).map((w) => w.word) : []));
  t.true(phonemes.length > 50, `${phonemes.length} phoneme timings reach the output for lip sync`);
  t.deepEqual(words.slice(0, 4), ['Hello!', 'I', 'am', 'Ada,']);
  await c.worker.cancel();
});

test('a French conversation: pinned language, French voice, French phrases', async (t) => {
  const c = await offlineConversation('fr', { startsConversation: true, greeting: { mode: 'generated' } });
  t.true(await c.until(() => c.turns().length >= 1, 20_000));
  t.regex(c.turns()[0]!, /^assistant: Bonjour ! Je suis Ada/);
  await c.say('Merci');
  t.true(await c.until(() => c.turns().length >= 3, 30_000), c.turns().join(' | '));
  t.deepEqual(c.turns().slice(1), ['user: Merci', 'assistant: Je vous en prie.']);
  await c.worker.cancel();
});

test('barge-in on the offline engines: the answer stops, the context keeps what was played, the next turn is answered', async (t) => {
  const c = await offlineConversation('en', {});
  await c.say('What can you do?');
  t.true(await c.until(() => c.sink.audioMs > 1500, 20_000, 0), 'the long answer is playing');
  t.true(c.voice.output.botSpeaking);
  const full = 'I am an offline stand-in, so I can greet you, make small talk, repeat what you say, and call a tool when you say call tool and its name.';
  await c.say('Thank you');
  t.true(await c.until(() => c.turns().length >= 4, 30_000), c.turns().join(' | '));
  const [question, cut, thanks, welcome] = c.turns();
  t.is(question, 'user: What can you do?');
  const played = cut!.replace(/^assistant: /, '');
  t.true(full.startsWith(played) && played.length < full.length, `"${played}" is a strict prefix of the answer`);
  t.deepEqual([thanks, welcome], ['user: Thank you', 'assistant: You are welcome.']);
  t.true(c.fromTts('tts-audio').length > 0);
  await c.worker.cancel();
});

test('a visitor who stops mid-question is heard out: "What is your," a 1.2 s pause, "name?" is one turn, answered as the whole question', async (t) => {
  // Before the offline STT knew the beginnings of its phrases, both pieces were `[unrecognised
  // speech]`: the turn waited the incomplete bound for words that never came and was answered "I
  // did not understand". Now the first is `What is your…` (an open ending: the turn waits), the
  // second is recognised joined to it (`name?`, a closed ending: the turn ends at once).
  const c = await offlineConversation('en', { startsConversation: false });
  await c.say('What is your,', 1200);
  t.deepEqual(c.decisions(), [], 'the turn did not end in the pause');
  // The words so far are open: a preemptive reply may start on them, and must not be heard.
  t.false(c.voice.output.botSpeaking);
  await c.say('name?');
  t.true(await c.until(() => c.turns().some((m) => m.startsWith('assistant:')), 30_000), `${c.turns().join(' | ')}; finals ${JSON.stringify(c.finals())}; turns ended: ${c.decisions().join(', ')}`);
  t.deepEqual(c.finals(), ['What is your…', 'name?']);
  t.is(c.decisions().length, 1, c.decisions().join(', '));
  t.regex(c.decisions()[0]!, /^complete \(text:closed\)/);
  t.deepEqual(c.turns().filter((m) => m.startsWith('user:')), ['user: What is your name?']);
  t.regex(c.turns().find((m) => m.startsWith('assistant:'))!, /Ada/);
  t.log(`preemptive replies: ${JSON.stringify(c.voice.user.preemptive)}; turn ${c.decisions()[0]}`);
});
