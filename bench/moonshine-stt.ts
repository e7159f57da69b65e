/**
 * `npm run bench -- moonshine-stt`: what `stt:moonshine` costs and what it hears, on the turns
 * bench's espeak voices (its complete questions, its open first halves, backchannels) and the human
 * read speech of Debian's pocketsphinx-testdata. Each utterance goes through the stream as a
 * pipeline feeds it (20 ms chunks, then `finalize()`); figures: the worker's time per recognition
 * (p50/p90/max, and per second of audio), the process's CPU time per recognition (its threads
 * included), how many complete questions came out closed (`?`/`.` after a word a sentence ends on:
 * the turn ends at the pause) and how many open halves came out open or saying nothing either way
 * (the turn waits). The load average is printed: the machine is shared.
 *
 * And what the turn analyzer (`RuleTurnAnalyzer`, as the voice pipeline sets it up for this STT:
 * its periods not read as endings) decides at the pipeline VAD's 200 ms pause, from the words the
 * pipeline has by then (the interim result) and the last second of audio: complete utterances
 * ended at the pause, and open first halves (the espeak ones and the human sentences cut as the
 * turns bench cuts them) not ended (`analyzer_*`, with each wrong decision listed). These figures
 * do not depend on the machine's load: they are what the turns bench's cut-offs and long waits
 * come from, without the transport. `MOONSHINE_BENCH_MODEL=base` measures the larger model.
 */
import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import { chunkAudio, concat, silence } from '../core/audio.ts';
import { LocalTTSService, MoonshineEngine, MoonshineSTT } from '../plugins/local/index.ts';
import { RuleTurnAnalyzer } from '../processors/turns/rule-turn-analyzer.ts';
import { textCue } from '../processors/turns/turn-endings.ts';
import type { MoonshineModelName } from '../plugins/local/index.ts';
import { percentile, printJson, printTable } from './table.ts';
import { BACKCHANNELS, COMPLETE, HUMAN, HUMAN_IDS, humanOpen, humanSentence, OPEN, VOICES } from './_turn-corpus.ts';

const RATE = 16_000;
const MODEL = (process.env.MOONSHINE_BENCH_MODEL ?? 'tiny') as MoonshineModelName;
/** The pipeline VAD's pause, when the analyzer first decides. */
const PAUSE_MS = 200;

/** The real engine, noting each recognition's own time. */
class TimedEngine extends MoonshineEngine {
  readonly times: Array<{ ms: number; audioMs: number }> = [];
  override async transcribe(audio: Float32Array, maxTokens: number) {
    const audioMs = (audio.length / RATE) * 1000;
    const r = await super.transcribe(audio, maxTokens);
    this.times.push({ ms: r.ms, audioMs });
    return r;
  }
}

async function speak(text: string, voice: string, rateWpm: number): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of new LocalTTSService({ voice, rateWpm }).synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts);
}

export async function run(): Promise<void> {
  const engine = new TimedEngine({ model: MODEL });
  const stt = new MoonshineSTT({ engine });
  const load = [loadavg()[0]!];
  try {
    await engine.start();
    const transcribe = async (pcm: Int16Array): Promise<{ text: string; cpuMs: number }> => {
      const stream = await stt.connect({ language: 'en', sampleRate: RATE, channels: 1, interimResults: false });
      let text = '';
      stream.transcripts.subscribe((e) => e.final && (text = e.text));
      const cpu = process.cpuUsage();
      for (const chunk of chunkAudio(concat([silence(200, RATE), pcm, silence(300, RATE)]), RATE, 20)) stream.sendAudio(chunk);
      stream.finalize();
      await stream.close();
      const used = process.cpuUsage(cpu);
      return { text, cpuMs: (used.user + used.system) / 1000 };
    };
    // The analyzer at the pause: the words the pipeline has then (the interim result, sent at
    // interimSilenceMs; the final when no interim came) and the last second of audio.
    const analyzer = new RuleTurnAnalyzer();
    const decide = async (pcm: Int16Array): Promise<{ heard: string; decision: string }> => {
      const stream = await stt.connect({ language: 'en', sampleRate: RATE, channels: 1, interimResults: true });
      let interim = '';
      let final = '';
      stream.transcripts.subscribe((e) => (e.final ? (final = e.text) : (interim ||= e.text)));
      for (const chunk of chunkAudio(concat([silence(200, RATE), pcm, silence(PAUSE_MS, RATE)]), RATE, 20)) stream.sendAudio(chunk);
      stream.finalize();
      await stream.close();
      const heard = interim || final;
      const audio = concat([silence(1000, RATE), pcm, silence(PAUSE_MS, RATE)]).slice(-RATE);
      const v = analyzer.analyze({ transcript: heard, language: 'en', audio, sampleRate: RATE, silenceMs: PAUSE_MS, closingPunctuation: stt.punctuation !== 'segments' });
      return { heard, decision: `${v.decision} (${v.reason ?? ''})` };
    };
    const rows: Array<Record<string, string>> = [];
    const cpu: number[] = [];
    let closed = 0;
    let complete = 0;
    let heldOpen = 0;
    let open = 0;
    let backchannelWords = 0;
    for (const [voice, wpm] of VOICES) {
      for (const [kind, texts] of [['complete', COMPLETE], ['open', OPEN.map(([first]) => first)], ['backchannel', BACKCHANNELS]] as const) {
        for (const said of texts) {
          const r = await transcribe(await speak(said, voice, wpm));
          cpu.push(r.cpuMs);
          const cue = textCue(r.text, 'en');
          if (kind === 'complete') {
            complete++;
            if (cue === 'closed') closed++;
          } else if (kind === 'open') {
            open++;
            if (cue !== 'closed') heldOpen++;
          } else if (/^(uh-huh|mm-hm+|yeah|right|okay|ok)\W*$/i.test(r.text)) backchannelWords++;
          rows.push({ voice: `${voice}@${wpm}`, said, heard: r.text, cue });
        }
      }
    }
    let human = 0;
    if (existsSync(HUMAN)) {
      for (const id of HUMAN_IDS) {
        const r = await transcribe(humanSentence(id));
        cpu.push(r.cpuMs);
        human++;
        rows.push({ voice: 'human (librivox)', said: id, heard: r.text, cue: textCue(r.text, 'en') });
      }
    }
    // The analyzer's decisions at the pause, on the turns bench's corpus.
    const decisions: Array<Record<string, string>> = [];
    const wrong: string[] = [];
    let endedAtPause = 0;
    let completeN = 0;
    let held = 0;
    let openN = 0;
    const judge = async (kind: 'complete' | 'open', label: string, pcm: Int16Array) => {
      const d = await decide(pcm);
      const right = kind === 'complete' ? d.decision.startsWith('complete') : !d.decision.startsWith('complete');
      if (kind === 'complete') (completeN++, right && endedAtPause++);
      else (openN++, right && held++);
      if (!right) wrong.push(`${kind} ${label}: ${d.decision}, heard ${JSON.stringify(d.heard)}`);
      decisions.push({ kind, said: label, heard: d.heard, decision: d.decision, right: right ? 'yes' : 'NO' });
    };
    for (const [voice, wpm] of VOICES) for (const said of COMPLETE) await judge('complete', `${voice}@${wpm} "${said}"`, await speak(said, voice, wpm));
    for (const [voice, wpm] of VOICES.slice(0, 2)) for (const [first] of OPEN) await judge('open', `${voice}@${wpm} "${first}"`, await speak(first, voice, wpm));
    let h = 0;
    for (const [first] of humanOpen()) await judge('open', `human ${++h} (first half)`, first);
    load.push(loadavg()[0]!);
    printTable(rows);
    printTable(decisions);
    const ms = engine.times.map((t) => t.ms);
    const perSecond = engine.times.map((t) => t.ms / (t.audioMs / 1000));
    const figures = {
      recognitions: ms.length,
      recognition_p50_ms: Math.round(percentile(ms, 50)),
      recognition_p90_ms: Math.round(percentile(ms, 90)),
      recognition_max_ms: Math.round(Math.max(...ms)),
      ms_per_audio_second_p50: Math.round(percentile(perSecond, 50)),
      cpu_per_utterance_p50_ms: Math.round(percentile(cpu, 50)),
      complete_closed: `${closed}/${complete}`,
      open_not_closed: `${heldOpen}/${open}`,
      backchannels_heard_as_such: `${backchannelWords}/${BACKCHANNELS.length * VOICES.length}`,
      human_utterances: human,
      analyzer_complete_ended_at_pause: `${endedAtPause}/${completeN}`,
      analyzer_open_not_ended: `${held}/${openN}`,
      model: MODEL,
      load_avg: Math.round(Math.max(...load) * 100) / 100,
    };
    printTable(Object.entries(figures).map(([figure, value]) => ({ figure, value: String(value) })));
    if (wrong.length) console.log(`the analyzer's wrong decisions at the pause:\n  ${wrong.join('\n  ')}`);
    printJson('moonshine_stt', figures);
  } finally {
    await engine.close();
  }
}
