/**
 * Turn taking in the whole voice pipeline (createVoicePipeline), in the conversation harness on
 * the virtual clock: when the user's turn ends (the turn analyzer against the old fixed rule),
 * preemptive replies, and the settings' defaults and overrides. False interruptions have their
 * own file (false-interruptions.test.ts).
 */
import test from 'ava';
import { concat, silence, VirtualClock } from '../../core/index.ts';
import { Conversation } from '../../testing/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { createVoicePipeline, type VoicePipelineOptions } from '../../agent/voice-pipeline.ts';
import { TURN_DEFAULTS, TurnProcessor } from '../../processors/turns/turn-processor.ts';
import { RuleTurnAnalyzer } from '../../processors/turns/rule-turn-analyzer.ts';
import { VAD_DEFAULTS } from '../../processors/vad/vad-processor.ts';
import type { TurnAnalyzer, TurnSignals, TurnVerdict } from '../../processors/services.ts';
import { EnergyVAD, ScriptedLLM, ScriptedSTT, ToneTTS, speech, type ScriptedResponse } from './scripted-services.ts';

const RATE = 16_000;

async function conversation(phrases: string[], responses: ScriptedResponse[], extra: Partial<VoicePipelineOptions> = {}, clock = new VirtualClock()) {
  const sink = new MemoryMediaSink();
  // A quick model and voice, so the end-of-turn wait is what the timings show.
  const llm = new ScriptedLLM(clock, responses, 50, 10);
  const stt = new ScriptedSTT(clock, phrases, 0);
  const voice = createVoicePipeline({ vad: new EnergyVAD(), stt, llm, tts: new ToneTTS(clock, 20), sink, language: 'en', vadOptions: { startMs: 100 }, ...extra });
  const c = await Conversation.start({ pipeline: voice.processors, clock, worker: { allowInterruptions: true } });
  return { c, clock, sink, llm, voice };
}

const writeTimes = new WeakMap<object, number>();
function writtenAt(_sink: MemoryMediaSink, a: object): number {
  return writeTimes.get(a) ?? Number.NaN;
}
/** Records the clock time of every write (the memory sink keeps only the playback position). */
function timed(sink: MemoryMediaSink, clock: VirtualClock): void {
  const write = sink.writeAudio.bind(sink);
  sink.writeAudio = (pcm, rate, pts) => {
    write(pcm, rate, pts);
    writeTimes.set(sink.audio.at(-1)!, clock.now());
  };
}

const userTurns = (v: { context: { messages(): { role: string; content: string | null }[] } }) => v.context.messages().filter((m) => m.role === 'user').map((m) => m.content);

test('defaults: a 200 ms pause, then unsure and incomplete bounds; preemptive replies and false-interruption resume on', (t) => {
  t.is(VAD_DEFAULTS.stopMs, 200);
  t.like(TURN_DEFAULTS, { unsureMs: 1500, incompleteMs: 2500, preemptiveGeneration: true, resumeFalseInterruptions: true, falseInterruptionMs: 600, backchannelMaxMs: 900 });
  const turns = new TurnProcessor(new RuleTurnAnalyzer());
  t.is(turns.settings.unsureMs, TURN_DEFAULTS.unsureMs);
  const tuned = new TurnProcessor(null, { unsureMs: 700, incompleteMs: 1800, falseInterruptionMs: 300, backchannelMaxMs: 500, preemptiveGeneration: false, resumeFalseInterruptions: false, backchannelWords: ['si si'] });
  t.like(tuned.settings, { unsureMs: 700, incompleteMs: 1800, falseInterruptionMs: 300, backchannelMaxMs: 500, preemptiveGeneration: false, resumeFalseInterruptions: false });
  t.deepEqual(tuned.settings.backchannelWords, ['si si']);
});

test('a complete question is answered after the short pause; the old fixed rule waits its 800 ms', async (t) => {
  const run = async (extra: Partial<VoicePipelineOptions>) => {
    const h = await conversation(['What time is it?'], ['It is noon.'], extra);
    timed(h.sink, h.clock);
    const spokeAt = h.clock.now();
    await h.c.say(concat([speech(800), silence(1500, RATE)]));
    const stopped = h.c.recorder.events.find((e) => e.source === h.voice.turns.name && e.frame.type === 'user-stopped-speaking' && e.direction === 'downstream')!;
    const firstAudio = h.sink.audio.find((a) => a.pcm.some((x) => x !== 0))!;
    await h.c.cancel();
    return { turnEndMs: stopped.timestampMs - (spokeAt + 800), replyMs: writtenAt(h.sink, firstAudio) - (spokeAt + 800), frame: stopped.frame };
  };
  const ours = await run({});
  // The VAD's 200 ms pause (its windows are 10 ms), then the analyzer: the words end with '?', so the turn ends at once.
  // (Audio is queued a 20 ms chunk ahead of the clock, as a transport delivers it.)
  t.true(ours.turnEndMs >= 180 && ours.turnEndMs <= 220, `turn ended ${ours.turnEndMs} ms after the speech`);
  t.like(ours.frame, { endOfTurnMs: 0, decision: 'complete (text:closed)' });
  const old = await run({ turnAnalyzer: null, vadOptions: { startMs: 100, stopMs: 800 } });
  t.true(old.turnEndMs >= 780 && old.turnEndMs <= 820, `old rule: ${old.turnEndMs} ms`);
  t.true(ours.replyMs < old.replyMs - 550, `reply ${ours.replyMs} ms after the speech, old rule ${old.replyMs} ms`);
  t.true(ours.replyMs < 400, `reply ${ours.replyMs} ms`);
});

for (const pauseMs of [800, 1200, 2000]) {
  test(`an open phrase with a ${pauseMs} ms pause is not cut off (the old rule cuts it)`, async (t) => {
    const phrases = () => ['I would like to book a table for', 'two people.'];
    const say = async (h: Awaited<ReturnType<typeof conversation>>) => {
      await h.c.say(concat([speech(900), silence(pauseMs, RATE), speech(700), silence(1500, RATE)]));
      await h.c.advance(3000);
    };
    // The first answer is the preemptive one, made in the pause from the first words and discarded.
    const h = await conversation(phrases(), ['For the first words.', 'For two, noted.']);
    await say(h);
    t.like(h.voice.user.preemptive, { started: 1, used: 0, discarded: 1 });
    t.deepEqual(userTurns(h.voice), ['I would like to book a table for two people.'], 'one turn, the whole phrase');
    t.is(h.c.framesFrom(h.voice.turns.name, 'user-stopped-speaking').length, 1);
    t.deepEqual(h.voice.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content), ['For two, noted.']);
    await h.c.cancel();

    const old = await conversation(phrases(), ['For two, noted.', 'Second answer.'], { turnAnalyzer: null, vadOptions: { startMs: 100, stopMs: 800 }, turnOptions: { preemptiveGeneration: false } });
    await say(old);
    t.deepEqual(userTurns(old.voice), ['I would like to book a table for', 'two people.'], 'the old rule answered half a phrase');
    await old.c.cancel();
  });
}

test('a preemptive reply started in a pause is discarded when the visitor goes on: none of it is heard or remembered', async (t) => {
  const h = await conversation(['I want a pizza', 'with extra cheese.'], ['PROVISIONAL pizza answer.', 'Extra cheese it is.']);
  await h.c.say(concat([speech(900), silence(1000, RATE)]));
  // During the pause the model already answered the first words: held, not played.
  t.is(h.voice.user.preemptive.started, 1);
  t.is(h.llm.requests.length, 1);
  t.deepEqual(h.llm.requests[0]!.messages.filter((m) => m.role === 'user').map((m) => m.content), ['I want a pizza']);
  t.true(h.voice.gate.holding, 'the reply is held');
  t.is(h.sink.audio.filter((a) => a.pcm.some((x) => x !== 0)).length, 0, 'nothing of it was played');
  await h.c.say(concat([speech(700), silence(1500, RATE)]));
  await h.c.advance(3000);
  t.like(h.voice.user.preemptive, { started: 1, used: 0, discarded: 1 });
  t.true(h.voice.gate.dropped > 0, `${h.voice.gate.dropped} frames of the discarded reply dropped`);
  const played = h.c.framesFrom(h.voice.output.name, 'tts-text').map((f) => (f.type === 'tts-text' ? f.text : '')).join(' ');
  t.false(played.includes('PROVISIONAL'), `played: ${played}`);
  t.true(played.includes('cheese'), 'the real answer played');
  t.deepEqual(userTurns(h.voice), ['I want a pizza with extra cheese.'], 'the context holds only what was said');
  t.deepEqual(h.voice.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content), ['Extra cheese it is.']);
  t.deepEqual(h.sink.messages.filter((m) => m.owner === 'user').map((m) => m.text), ['I want a pizza with extra cheese.']);
  await h.c.cancel();
});

test('a preemptive reply is used when the pause ends the turn: it plays as the turn ends', async (t) => {
  // No punctuation and a level tone: the analyzer cannot tell, and waits the incomplete bound.
  const h = await conversation(['tell me a joke'], ['Why did the chicken cross the road.']);
  timed(h.sink, h.clock);
  await h.c.say(concat([speech(900), silence(3500, RATE)]));
  t.like(h.voice.user.preemptive, { started: 1, used: 1, discarded: 0 });
  const stopped = h.c.recorder.events.find((e) => e.source === h.voice.turns.name && e.frame.type === 'user-stopped-speaking' && e.direction === 'downstream')!;
  t.like(stopped.frame, { decision: 'incomplete (prosody:held)' });
  const first = h.sink.audio.find((a) => a.pcm.some((x) => x !== 0))!;
  const waitMs = writtenAt(h.sink, first) - stopped.timestampMs;
  t.true(waitMs >= 0 && waitMs <= 20, `first audio ${waitMs} ms after the end of the turn (made during the pause)`);
  t.is(h.llm.requests.length, 1, 'the model ran once');
  t.deepEqual(userTurns(h.voice), ['tell me a joke']);
  t.deepEqual(h.sink.messages.filter((m) => m.owner === 'user').map((m) => m.text), ['tell me a joke']);
  await h.c.advance(3000);
  t.deepEqual(h.voice.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content), ['Why did the chicken cross the road.']);
  await h.c.cancel();
});

test('a preemptive reply that calls a tool is handed back: no tool runs before the turn ends, and the turn is answered then', async (t) => {
  const h = await conversation(['look up my order'], [{ toolCalls: [{ id: 'c1', name: 'lookup', arguments: '{}' }] }, 'Your order is on its way.']);
  await h.c.say(concat([speech(900), silence(1000, RATE)]));
  t.like(h.voice.user.preemptive, { started: 1, discarded: 1 });
  t.is(h.c.pushes('tool-calls').length, 0, 'no tool call surfaced');
  t.is(h.voice.context.messages().filter((m) => m.toolCalls).length, 0);
  await h.c.advance(3000);
  t.deepEqual(userTurns(h.voice), ['look up my order']);
  t.is(h.llm.requests.length, 2, 'answered normally once the turn ended');
  await h.c.cancel();
});

test('settings override per pipeline: a shorter incomplete bound ends a thinking pause sooner; preemptive replies can be off', async (t) => {
  const h = await conversation(['I would like to book a table for', 'two people.'], ['Noted.', 'Second.'], { turnOptions: { incompleteMs: 1000, preemptiveGeneration: false } });
  await h.c.say(concat([speech(900), silence(1200, RATE), speech(700), silence(1500, RATE)]));
  await h.c.advance(2000);
  t.deepEqual(userTurns(h.voice).slice(0, 1), ['I would like to book a table for'], 'cut at the 1 s bound');
  t.is(h.voice.user.preemptive.started, 0);
  await h.c.cancel();
});

/**
 * An analyzer that answers later, as a model in a worker thread would: `answer` decides each
 * reading (a verdict, an error to reject with, or 'never'), `delayMs` of virtual time after it is
 * asked. It keeps what it was asked and which readings were aborted.
 */
class LaterAnalyzer implements TurnAnalyzer {
  readonly name = 'later';
  readonly asked: Array<{ transcript: string; at: number; aborted: boolean }> = [];
  constructor(
    private readonly clock: VirtualClock,
    private readonly delayMs: number,
    private readonly answer: (s: TurnSignals) => TurnVerdict | Error | 'never',
  ) {}

  analyze(s: TurnSignals, options?: { readonly signal: AbortSignal }): Promise<TurnVerdict> {
    const entry = { transcript: s.transcript, at: this.clock.now(), aborted: false };
    this.asked.push(entry);
    options?.signal.addEventListener('abort', () => (entry.aborted = true));
    return new Promise((resolve, reject) => {
      const a = this.answer(s);
      if (a === 'never') return;
      this.clock.setTimeout(() => (a instanceof Error ? reject(a) : resolve(a)), this.delayMs);
    });
  }
}

const turnEnds = (h: Awaited<ReturnType<typeof conversation>>) =>
  h.c.recorder.events.filter((e) => e.source === h.voice.turns.name && e.frame.type === 'user-stopped-speaking' && e.direction === 'downstream');

test('an analyzer that answers later (a model in a worker): the turn ends when its answer comes, and its verdict is the one reported', async (t) => {
  const clock = new VirtualClock();
  const analyzer = new LaterAnalyzer(clock, 60, () => ({ decision: 'complete', reason: 'model:end' }));
  const h = await conversation(['What time is it?'], ['It is noon.'], { turnAnalyzer: analyzer }, clock);
  const spokeAt = h.clock.now();
  await h.c.say(concat([speech(800), silence(1500, RATE)]));
  const ends = turnEnds(h);
  t.is(ends.length, 1);
  const last = analyzer.asked.at(-1)!;
  t.false(last.aborted, 'the answer used was not aborted');
  // Asked at the VAD's pause (or again when the words came), answered 60 ms later: the turn ends then, not before.
  t.is(ends[0]!.timestampMs, last.at + 60);
  t.true(last.at - (spokeAt + 800) >= 180 && last.at - (spokeAt + 800) <= 240, `asked ${last.at - (spokeAt + 800)} ms after the speech`);
  t.like(ends[0]!.frame, { decision: 'complete (model:end)' });
  t.true((ends[0]!.frame as { endOfTurnMs: number }).endOfTurnMs >= 60, 'the wait for the answer is in the end-of-turn delay');
  t.deepEqual(h.voice.turns.stats.reasons, { 'model:end': 1 });
  t.deepEqual(userTurns(h.voice), ['What time is it?']);
  await h.c.cancel();
});

test('a pending answer is dropped when the visitor goes on: aborted, ignored when it comes, and the phrase is one turn', async (t) => {
  const clock = new VirtualClock();
  // Every reading says complete, 300 ms after it is asked: the visitor speaks again before the first answer.
  const analyzer = new LaterAnalyzer(clock, 300, () => ({ decision: 'complete', reason: 'model:end' }));
  const h = await conversation(['I would like to book a table for', 'two people.'], ['For two.'], { turnAnalyzer: analyzer }, clock);
  await h.c.say(concat([speech(900), silence(350, RATE), speech(700), silence(1500, RATE)]));
  await h.c.advance(1000);
  const firstPause = analyzer.asked.filter((a) => !a.transcript.includes('two people'));
  t.true(firstPause.length >= 1, 'asked at the first pause');
  t.true(firstPause.every((a) => a.aborted), 'the first pause\'s readings were aborted when the visitor went on');
  t.is(turnEnds(h).length, 1);
  t.deepEqual(userTurns(h.voice), ['I would like to book a table for two people.']);
  await h.c.cancel();
});

test('an analyzer that never answers cannot hold the turn: it ends at the incomplete bound', async (t) => {
  const clock = new VirtualClock();
  const analyzer = new LaterAnalyzer(clock, 0, () => 'never');
  const h = await conversation(['What time is it?'], ['It is noon.'], { turnAnalyzer: analyzer, turnOptions: { incompleteMs: 1200 } }, clock);
  const spokeAt = h.clock.now();
  await h.c.say(concat([speech(800), silence(2000, RATE)]));
  const ends = turnEnds(h);
  t.is(ends.length, 1);
  const afterSpeech = ends[0]!.timestampMs - (spokeAt + 800);
  t.true(afterSpeech >= 1180 && afterSpeech <= 1220, `ended ${afterSpeech} ms after the speech (bound 1200)`);
  t.like(ends[0]!.frame, { decision: 'incomplete (analyzer:pending)' });
  t.true(analyzer.asked.every((a) => a.aborted), 'what was still pending was aborted when the turn ended');
  t.deepEqual(h.voice.turns.stats.reasons, { 'analyzer:pending': 1 });
  t.is(h.voice.user.preemptive.started, 0, 'no preemptive reply without a reading');
  t.deepEqual(userTurns(h.voice), ['What time is it?']);
  await h.c.cancel();
});

test('an analyzer that fails (throws, rejects, or answers nonsense) reads as unsure, reported once as a non-fatal turn_analyzer_failed', async (t) => {
  for (const failure of ['throws', 'rejects', 'nonsense'] as const) {
    const clock = new VirtualClock();
    const later = new LaterAnalyzer(clock, 20, () => new Error('model crashed'));
    const analyzer: TurnAnalyzer =
      failure === 'throws'
        ? { name: 'broken', analyze: () => { throw new Error('model crashed'); } }
        : failure === 'rejects'
          ? later
          : { name: 'odd', analyze: () => ({ decision: 'maybe', reason: 'x' }) as unknown as TurnVerdict };
    const h = await conversation(['What time is it?', 'And tomorrow?'], ['It is noon.', 'Sunny.'], { turnAnalyzer: analyzer, turnOptions: { unsureMs: 700 } }, clock);
    const spokeAt = h.clock.now();
    await h.c.say(concat([speech(800), silence(1500, RATE)]));
    await h.c.say(concat([speech(800), silence(1500, RATE)]));
    const ends = turnEnds(h);
    t.is(ends.length, 2, failure);
    const afterSpeech = ends[0]!.timestampMs - (spokeAt + 800);
    t.true(afterSpeech >= 680 && afterSpeech <= 720, `${failure}: ended ${afterSpeech} ms after the speech (unsure bound 700)`);
    t.like(ends[0]!.frame, { decision: 'unsure (analyzer:error)' }, failure);
    const errors = h.c.framesFrom(h.voice.turns.name, 'error', 'upstream');
    t.is(errors.length, 1, `${failure}: one error for two failed turns`);
    t.like(errors[0], { code: 'turn_analyzer_failed', fatal: false }, failure);
    t.deepEqual(userTurns(h.voice), ['What time is it?', 'And tomorrow?'], `${failure}: the conversation goes on`);
    await h.c.cancel();
  }
});

