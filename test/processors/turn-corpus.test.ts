/**
 * The turn analyzer on a corpus it was not tuned on, made here: complete utterances and open
 * ones (cut with a continuation, then a pause of 0.5-2 s) from several espeak voices and speeds,
 * and the human read speech of Debian's pocketsphinx-testdata cut mid-sentence at its quietest
 * point. Offline conditions: the real WebRTC VAD and no words (the offline STT gives none before
 * the pause), so the prosody decides. Compared with the old fixed rule (800 ms of silence) on the
 * same audio, on the virtual clock. What the figures are is printed; what is asserted is what
 * the issue asks: fewer cut-offs than the old rule on pauses it cuts, and complete utterances
 * ended sooner than its 800 ms.
 */
import test from 'ava';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chunkAudio, concat, frame, Pipeline, PipelineWorker, rms, silence, VirtualClock } from '../../core/index.ts';
import { PassThroughProcessor } from '../../core/processor.ts';
import { RecordingObserver } from '../../core/observer.ts';
import { RuleTurnAnalyzer } from '../../processors/turns/rule-turn-analyzer.ts';
import { TurnProcessor } from '../../processors/turns/turn-processor.ts';
import { VADProcessor } from '../../processors/vad/vad-processor.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { WebRtcVADAnalyzer } from '../../plugins/local/webrtc-vad.ts';

const RATE = 16_000;
const HUMAN = '/usr/share/pocketsphinx/test/data/librivox';
const VOICES = [['en-us', 175], ['en', 140], ['en-gb-scotland', 210], ['en-029', 170]] as const;
const COMPLETE = ['What is your name?', 'I need help with my order.', 'That sounds great.', 'Tell me a joke.', 'Can you call me tomorrow?', 'Thank you.'];
const OPEN = ['I would like to book a table for,', 'I was wondering if,', 'Could you tell me about the,', 'So I went to the store and,'];

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

/** Feeds `pcm` then `silenceMs` through VAD -> turns; the silence (ms after the speech) at which the turn ended, or null. */
async function turnEnd(pcm: Int16Array, silenceMs: number, rule: 'ours' | 'old'): Promise<number | null> {
  const clock = new VirtualClock();
  const vad = new VADProcessor(new WebRtcVADAnalyzer(), rule === 'old' ? { stopMs: 800 } : {});
  const turns = new TurnProcessor(rule === 'old' ? null : new RuleTurnAnalyzer(), { preemptiveGeneration: false });
  const observer = new RecordingObserver();
  const worker = new PipelineWorker(new Pipeline([vad, turns, new PassThroughProcessor()]), { clock, heartbeatMs: null, idleTimeoutMs: null, observers: [observer] });
  void worker.run();
  await clock.advance(0);
  const speechEnd = (pcm.length / RATE) * 1000;
  for (const c of chunkAudio(concat([pcm, silence(silenceMs, RATE)]), RATE, 20)) {
    worker.queueFrame(frame('input-audio', { pcm: c, sampleRate: RATE, channels: 1 }));
    await clock.advance(20);
  }
  const stop = observer.events.find((e) => e.source === turns.name && e.frame.type === 'user-stopped-speaking' && e.direction === 'downstream');
  await worker.cancel();
  return stop ? stop.timestampMs - speechEnd : null;
}

test('on an unseen corpus (espeak voices and speeds, human read speech), the analyzer cuts fewer open utterances than the old rule and ends complete ones sooner', async (t) => {
  if (!existsSync(HUMAN)) t.fail(`${HUMAN} is missing: scripts/prepare-test-machine.sh installs pocketsphinx-testdata`);
  const complete: Int16Array[] = [];
  const open: Int16Array[] = [];
  for (const [voice, wpm] of VOICES) {
    for (const text of COMPLETE) complete.push(await speak(text, voice, wpm));
    for (const text of OPEN) open.push(await speak(text, voice, wpm));
  }
  const people = human();
  complete.push(...people.whole);
  open.push(...people.firstHalves);

  const ended = async (list: Int16Array[], silenceMs: number, rule: 'ours' | 'old') => Promise.all(list.map((pcm) => turnEnd(pcm, silenceMs, rule)));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  // Complete utterances: when the turn ended (with 3 s of silence after, every turn ends).
  const oursComplete = (await ended(complete, 3000, 'ours')).map((x) => x ?? Infinity);
  const oldComplete = (await ended(complete, 3000, 'old')).map((x) => x ?? Infinity);
  t.log(`complete utterances (${complete.length}): turn ended after median ${median(oursComplete)} ms (old rule ${median(oldComplete)} ms); within 300 ms: ${oursComplete.filter((x) => x <= 300).length}`);
  t.true(median(oursComplete) < median(oldComplete), 'complete utterances end sooner than with the old rule');
  // Open utterances: cut off when the turn ended within the pause.
  const lines: string[] = [];
  for (const pauseMs of [500, 800, 1200, 2000]) {
    const cut = (xs: (number | null)[]) => xs.filter((x) => x !== null && x < pauseMs).length;
    const ours = cut(await ended(open, pauseMs, 'ours'));
    const old = cut(await ended(open, pauseMs, 'old'));
    lines.push(`${pauseMs} ms: ours ${ours}/${open.length}, old ${old}/${open.length}`);
    if (pauseMs >= 800) t.true(ours < old, `pause ${pauseMs} ms: ${ours} cut off against ${old} with the old rule`);
  }
  t.log(`open utterances cut off, by pause: ${lines.join('; ')}`);
});
