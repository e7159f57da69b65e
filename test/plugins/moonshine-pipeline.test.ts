/**
 * `stt:moonshine` in the voice pipeline, on the virtual clock: its interim words reach the turn
 * analyzer at the short pause, so a question said with a held or rising end is answered at the
 * pause (with `stt:local` it waited the incomplete bound when its phrase list did not know the
 * voice) and a phrase that stops on an open word is heard out.
 */
import test from 'ava';
import { concat, silence, VirtualClock } from '../../core/index.ts';
import type { Frame } from '../../core/frames.ts';
import { Conversation } from '../../testing/index.ts';
import { TURN_DEFAULTS } from '../../processors/turns/turn-processor.ts';
import { createVoicePipeline } from '../../agent/voice-pipeline.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { LocalResponder, LocalTTSService, MoonshineEngine, MoonshineSTT, WebRtcVADAnalyzer } from '../../plugins/local/index.ts';

const RATE = 16_000;

/** The real engine, counting the recognitions in flight so virtual time can wait for them (they run in real time). */
class CountingEngine extends MoonshineEngine {
  inFlight = 0;
  override async transcribe(audio: Float32Array, maxTokens: number) {
    this.inFlight++;
    try {
      return await super.transcribe(audio, maxTokens);
    } finally {
      this.inFlight--;
    }
  }
}

const engine = new CountingEngine();
test.after.always(() => engine.close());

async function conversation() {
  const clock = new VirtualClock();
  const tts = new LocalTTSService();
  await tts.warmUp();
  // The model loads in real time (0.3-2 s): loaded first, so virtual time does not run past it.
  await engine.start();
  const voice = createVoicePipeline({
    vad: new WebRtcVADAnalyzer(),
    stt: new MoonshineSTT({ engine }),
    llm: new LocalResponder(),
    tts,
    sink: new MemoryMediaSink(),
    language: 'en',
    systemPrompt: 'You are Ada.',
    behaviours: { startsConversation: false },
  });
  // Virtual time stops while a recognition runs, however long a loaded machine takes (the words must reach the turn analyzer at the pause, as they do in real time).
  const c = await Conversation.start({ pipeline: voice.processors, clock, sampleRate: RATE, realPauseMs: 1, busy: () => engine.inFlight > 0, maxBusyWaitMs: 30_000, worker: { allowInterruptions: true } });
  const say = async (text: string, voiceName: string, pauseMs: number) => {
    const parts: Int16Array[] = [];
    for await (const e of new LocalTTSService({ voice: voiceName }).synthesize({ text, language: 'en', sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
    await c.say(concat([...parts, silence(pauseMs, RATE)]));
  };
  const turns = () => voice.context.messages().filter((m) => m.role === 'user' || m.role === 'assistant').map((m) => `${m.role}: ${m.content}`);
  const decisions = () =>
    [...new Set(c.recorder.events.filter((e) => e.frame.type === 'user-stopped-speaking' && e.direction === 'downstream').map((e) => e.frame))].map(
      (f) => f as Extract<Frame, { type: 'user-stopped-speaking' }>,
    );
  return { c, voice, say, turns, decisions };
}

/** Transcripts and the turn processor's decisions with their virtual times: what a failure shows. */
function timeline(c: Conversation): string {
  const shown = new Set(['transcription', 'vad-speech-started', 'vad-speech-stopped', 'user-turn-pending', 'user-stopped-speaking']);
  return c.recorder.events
    .filter((e) => shown.has(e.frame.type) && (e.source.startsWith('TurnProcessor') || (e.destination.startsWith('TurnProcessor') && e.frame.type === 'transcription')))
    .map((e) => `${e.timestampMs} ms ${e.source} ${e.frame.type} ${JSON.stringify({ ...e.frame, id: undefined, type: undefined })}`)
    .join('\n');
}

test.serial('a question said with a rising end in a voice stt:local does not know ends at the short pause, on its question mark', async (t) => {
  // en-029's "What can you do?": its pitch does not fall (prosody: incomplete) and stt:local's
  // templates are too far from it (`[unrecognised speech]`): with stt:local the turn waited 2.5 s.
  const { c, say, decisions, turns } = await conversation();
  await say('What can you do?', 'en-029', 1000);
  const ended = decisions();
  t.is(ended.length, 1, JSON.stringify(ended));
  t.regex(ended[0]!.decision ?? '', /^complete \(text:closed\)/);
  t.true((ended[0]!.endOfTurnMs ?? Infinity) < 300, `the turn ended ${ended[0]!.endOfTurnMs} ms after the VAD's pause`);
  t.deepEqual(turns().filter((m) => m.startsWith('user:')), ['user: What can you do?']);
  await c.worker.cancel();
});

test.serial("the recogniser's period closes nothing: the turn is decided by the prosody, as without words", async (t) => {
  // stt:moonshine ends every segment with a period; a visitor who paused after "My name is" would
  // be cut off if it were read as an ending. Here the words say nothing either way.
  const { c, say, decisions } = await conversation();
  await say('The weather today', 'en-us', 1000);
  const ended = decisions();
  t.is(ended.length, 1, JSON.stringify(ended));
  t.notRegex(ended[0]!.decision ?? '', /text:closed/, 'not ended on the period');
  t.regex(ended[0]!.decision ?? '', /\(prosody:/);
  await c.worker.cancel();
});

test.serial('a phrase that stops on an open word is heard out: "I would like a table for," a 1.2 s pause, "two people at eight tonight." is one turn', async (t) => {
  const { c, say, decisions, turns } = await conversation();
  await say('I would like a table for,', 'en-us', 1200);
  t.deepEqual(decisions(), [], 'the turn did not end in the pause');
  // How soon the turn ends after the second half is not what this test is about: it depends on the
  // model's words for that half, which vary with the audio's exact cut (below; words ending open,
  // "...at eight to", hold the turn to the incomplete bound). A hog CI run once saw no end within
  // the 1 s this test gave (its cause not captured: a failure now prints the timeline), so it waits
  // up to the longest bound, in virtual time.
  await say('two people at eight tonight.', 'en-us', 200);
  await c.settle(() => decisions().length > 0, TURN_DEFAULTS.incompleteMs + 500);
  const ended = decisions();
  t.is(ended.length, 1, `${JSON.stringify(ended)}; what the turn processor was told and said:\n${timeline(c)}`);
  const user = turns().filter((m) => m.startsWith('user:'));
  t.is(user.length, 1, user.join(' | '));
  // Both halves are in the one turn. The model's words for the second differ with the audio's
  // exact cut ("at eight tonight", "have ate tonight", "have ate to hide" seen): its accuracy on
  // eSpeak is not what this test is about.
  t.regex(user[0]!, /table for\W+\S+ people/i);
  await c.worker.cancel();
});
