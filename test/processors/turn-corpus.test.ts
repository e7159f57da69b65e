/**
 * The turn analyzer on a corpus it was not tuned on, made here: complete utterances and open
 * ones (cut with a continuation, then a pause of 0.5-2 s) from several espeak voices and speeds,
 * and the human read speech of Debian's pocketsphinx-testdata cut mid-sentence at its quietest
 * point. Compared with the old fixed rule (800 ms of silence) on the same audio, on the virtual
 * clock, with the real WebRTC VAD, in two conditions:
 *
 * - offline, as the offline engines run: `stt:local` in the pipeline. It recognises none of the
 *   open utterances as one of its phrases (its final is `[unrecognised speech]`, so its
 *   punctuation never closes an open turn) and gives no interim words: the prosody decides.
 *   What is left there is measured and asserted precisely: every cut-off at a pause up to 1.2 s
 *   is a final pitch fall read at the short pause (an open phrase said with a falling voice,
 *   which pitch alone cannot tell from a finished one); none comes from the unsure bound.
 * - with words, as a streaming cloud STT gives them (interim words during speech, a punctuated
 *   final after the pause): no open utterance is cut off at any pause up to 2 s.
 */
import test from 'ava';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Subject } from 'rxjs';
import { chunkAudio, concat, frame, Pipeline, PipelineWorker, rms, silence, VirtualClock, type Clock } from '../../core/index.ts';
import { PassThroughProcessor, type FrameProcessor } from '../../core/processor.ts';
import { RecordingObserver } from '../../core/observer.ts';
import type { STTService, STTStream, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { STTProcessor } from '../../processors/stt/stt-processor.ts';
import { RuleTurnAnalyzer } from '../../processors/turns/rule-turn-analyzer.ts';
import { TurnProcessor } from '../../processors/turns/turn-processor.ts';
import { VADProcessor } from '../../processors/vad/vad-processor.ts';
import { LocalPhraseSTT, LocalTTSService, UNRECOGNISED_SPEECH } from '../../plugins/local/index.ts';
import { WebRtcVADAnalyzer } from '../../plugins/local/webrtc-vad.ts';

const RATE = 16_000;
const HUMAN = '/usr/share/pocketsphinx/test/data/librivox';
const VOICES = [['en-us', 175], ['en', 140], ['en-gb-scotland', 210], ['en-029', 170]] as const;
const COMPLETE = ['What is your name?', 'I need help with my order.', 'That sounds great.', 'Tell me a joke.', 'Can you call me tomorrow?', 'Thank you.'];
const OPEN = ['I would like to book a table for,', 'I was wondering if,', 'Could you tell me about the,', 'So I went to the store and,'];
const PAUSES = [500, 800, 1200, 2000];

interface Utterance {
  readonly pcm: Int16Array;
  /** What was said, as a punctuating provider would transcribe it; undefined for the human halves. */
  readonly text: string | undefined;
}

async function speak(text: string, voice: string, rateWpm: number): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of new LocalTTSService({ voice, rateWpm }).synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts);
}

function human(): { whole: Int16Array[]; firstHalves: Int16Array[] } {
  const whole: Int16Array[] = [];
  const firstHalves: Int16Array[] = [];
  for (const id of ['0870', '0880', '0890', '0920', '0930']) {
    const b = readFileSync(join(HUMAN, `sense_and_sensibility_01_austen_64kb-${id}.wav`));
    const pcm = new Int16Array(b.buffer.slice(b.byteOffset + 44, b.byteOffset + b.length));
    whole.push(pcm);
    let cut = 0;
    let quietest = Infinity;
    for (let i = Math.floor((pcm.length * 0.35) / 160); i < (pcm.length * 0.65) / 160; i++) {
      const e = rms(pcm.subarray(i * 160, (i + 3) * 160));
      if (e < quietest) [quietest, cut] = [e, (i + 1) * 160];
    }
    firstHalves.push(pcm.slice(0, cut));
  }
  return { whole, firstHalves };
}

let corpus: Promise<{ complete: Utterance[]; open: Utterance[] }> | undefined;
function theCorpus() {
  corpus ??= (async () => {
    const complete: Utterance[] = [];
    const open: Utterance[] = [];
    for (const [voice, wpm] of VOICES) {
      for (const text of COMPLETE) complete.push({ pcm: await speak(text, voice, wpm), text });
      // A provider may or may not write the trailing comma: the words alone must say it goes on.
      for (const text of OPEN) open.push({ pcm: await speak(text, voice, wpm), text: text.replace(/,$/, '') });
    }
    const people = human();
    complete.push(...people.whole.map((pcm) => ({ pcm, text: undefined })));
    open.push(...people.firstHalves.map((pcm) => ({ pcm, text: undefined })));
    return { complete, open };
  })();
  return corpus;
}

/**
 * A streaming cloud STT as the turn analyzer sees one: interims with the words (unpunctuated)
 * every 100 ms of audio from 300 ms on, the punctuated final `latencyMs` after the first finalize().
 */
class StreamingWordsSTT implements STTService {
  readonly name = 'streaming-words';
  constructor(private readonly clock: Clock, private readonly text: string, private readonly latencyMs = 150) {}
  async connect(options: STTStreamOptions): Promise<STTStream> {
    const subject = new Subject<TranscriptEvent>();
    let samples = 0;
    let interimAt = 0.3 * options.sampleRate;
    let final = false;
    return {
      sendAudio: (pcm) => {
        samples += pcm.length;
        // Interims come again and again while audio comes (the turn opens on the VAD's start, after the first one).
        if (!final && samples >= interimAt) {
          interimAt += 0.1 * options.sampleRate;
          subject.next({ text: this.text.replace(/[.?!,]+$/, '').toLowerCase(), final: false });
        }
      },
      finalize: () => {
        if (final) return;
        final = true;
        this.clock.setTimeout(() => subject.next({ text: this.text, final: true, language: options.language }), this.latencyMs);
      },
      transcripts: subject.asObservable(),
      close: async () => subject.complete(),
    };
  }
}

const offlineSTT = new LocalPhraseSTT();

type Rule = 'old' | 'offline' | 'words';

/** Feeds `u` then `silenceMs` through VAD -> (STT) -> turns; when the turn ended (ms after the speech, null: not within the silence) and why. */
async function turnEnd(u: Utterance, silenceMs: number, rule: Rule): Promise<{ endMs: number | null; decision: string | undefined; finals: string[] }> {
  const clock = new VirtualClock();
  const vad = new VADProcessor(new WebRtcVADAnalyzer(), rule === 'old' ? { stopMs: 800 } : {});
  const turns = new TurnProcessor(rule === 'old' ? null : new RuleTurnAnalyzer(), { preemptiveGeneration: false });
  const processors: FrameProcessor[] = [vad];
  if (rule === 'offline') processors.push(new STTProcessor(offlineSTT, { language: 'en' }));
  if (rule === 'words') processors.push(new STTProcessor(new StreamingWordsSTT(clock, u.text!), { language: 'en' }));
  processors.push(turns, new PassThroughProcessor());
  const observer = new RecordingObserver();
  const worker = new PipelineWorker(new Pipeline(processors), { clock, heartbeatMs: null, idleTimeoutMs: null, observers: [observer] });
  void worker.run();
  await clock.advance(0);
  const speechEnd = (u.pcm.length / RATE) * 1000;
  for (const c of chunkAudio(concat([u.pcm, silence(silenceMs, RATE)]), RATE, 20)) {
    worker.queueFrame(frame('input-audio', { pcm: c, sampleRate: RATE, channels: 1 }));
    await clock.advance(20);
    // The offline STT recognises off the clock (its DTW runs in a promise chain): let it land.
    if (rule === 'offline') await new Promise((resolve) => setImmediate(resolve));
  }
  const stop = observer.events.find((e) => e.source === turns.name && e.frame.type === 'user-stopped-speaking' && e.direction === 'downstream');
  const finals = observer.events
    .filter((e) => e.source === turns.name && e.direction === 'downstream' && e.frame.type === 'transcription' && e.frame.final)
    .map((e) => (e.frame.type === 'transcription' ? e.frame.text : ''));
  await worker.cancel();
  return { endMs: stop ? stop.timestampMs - speechEnd : null, decision: stop?.frame.type === 'user-stopped-speaking' ? stop.frame.decision : undefined, finals };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

test('offline (WebRTC VAD, stt:local): complete utterances end sooner than with the old rule; open ones are cut off less at every pause of 0.8 s and more, and what is cut up to 1.2 s is a pitch fall read at the short pause', async (t) => {
  if (!existsSync(HUMAN)) t.fail(`${HUMAN} is missing: scripts/prepare-test-machine.sh installs pocketsphinx-testdata`);
  const { complete, open } = await theCorpus();
  const ended = (list: Utterance[], silenceMs: number, rule: Rule) => Promise.all(list.map((u) => turnEnd(u, silenceMs, rule)));
  // Complete utterances: when the turn ended (with 3 s of silence after, every turn ends).
  const oursComplete = (await ended(complete, 3000, 'offline')).map((r) => r.endMs ?? Infinity);
  const oldComplete = (await ended(complete, 3000, 'old')).map((r) => r.endMs ?? Infinity);
  t.log(`complete utterances (${complete.length}): turn ended after median ${median(oursComplete)} ms (old rule ${median(oldComplete)} ms); within 300 ms: ${oursComplete.filter((x) => x <= 300).length}`);
  t.true(median(oursComplete) < median(oldComplete), 'complete utterances end sooner than with the old rule');
  // Open utterances: cut off when the turn ended within the pause.
  const lines: string[] = [];
  for (const pauseMs of PAUSES) {
    const ours = await ended(open, pauseMs, 'offline');
    const old = await ended(open, pauseMs, 'old');
    const cut = (rs: typeof ours) => rs.filter((r) => r.endMs !== null && r.endMs < pauseMs);
    lines.push(`${pauseMs} ms: ours ${cut(ours).length}/${open.length}, old ${cut(old).length}/${open.length}`);
    // The offline STT's final closes no open turn: it is never one of its punctuated phrases.
    t.true(ours.every((r) => r.finals.every((text) => text === UNRECOGNISED_SPEECH)), `pause ${pauseMs} ms: finals ${JSON.stringify(ours.flatMap((r) => r.finals))}`);
    if (pauseMs >= 800) t.true(cut(ours).length < cut(old).length, `pause ${pauseMs} ms: ${cut(ours).length} cut off against ${cut(old).length} with the old rule`);
    if (pauseMs <= 1200) t.deepEqual(cut(ours).map((r) => r.decision), cut(ours).map(() => 'complete (prosody:fall)'), `pause ${pauseMs} ms: only pitch falls cut`);
  }
  t.log(`open utterances cut off, by pause: ${lines.join('; ')}`);
});

test('with words (a streaming cloud STT: interim words, a punctuated final): no open utterance is cut off at any pause up to 2 s, and complete ones end within the short pause and the final', async (t) => {
  const { complete, open } = await theCorpus();
  const spoken = (list: Utterance[]) => list.filter((u) => u.text !== undefined);
  const latencyMs = 150;
  const completeEnds = await Promise.all(spoken(complete).map((u) => turnEnd(u, 3000, 'words')));
  const ends = completeEnds.map((r) => r.endMs ?? Infinity);
  t.log(`complete utterances with words (${ends.length}): turn ended after median ${median(ends)} ms, at most ${Math.max(...ends)} ms`);
  // The VAD's 200 ms pause (in 10-30 ms windows), then at worst the final's latency.
  t.true(ends.every((x) => x <= 200 + 30 + latencyMs), `every complete utterance ends by the final: ${ends.join(', ')}`);
  for (const pauseMs of PAUSES) {
    const rs = await Promise.all(spoken(open).map((u) => turnEnd(u, pauseMs, 'words')));
    const cut = rs.filter((r) => r.endMs !== null && r.endMs < pauseMs);
    t.is(cut.length, 0, `pause ${pauseMs} ms: ${cut.length}/${rs.length} cut off (${cut.map((r) => r.decision).join(', ')})`);
  }
});
