/**
 * `npm run bench -- moonshine-stt`: what `stt:moonshine` costs and what it hears, on the turns
 * bench's espeak voices (its complete questions, its open first halves, backchannels) and the human
 * read speech of Debian's pocketsphinx-testdata. Each utterance goes through the stream as a
 * pipeline feeds it (20 ms chunks, then `finalize()`); figures: the worker's time per recognition
 * (p50/p90/max, and per second of audio), the process's CPU time per recognition (its threads
 * included), how many complete questions came out closed (`?`/`.` after a word a sentence ends on:
 * the turn ends at the pause) and how many open halves came out open or saying nothing either way
 * (the turn waits). The load average is printed: the machine is shared.
 */
import { existsSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { chunkAudio, concat, silence } from '../core/audio.ts';
import { LocalTTSService, MoonshineEngine, MoonshineSTT } from '../plugins/local/index.ts';
import { textCue } from '../processors/turns/turn-endings.ts';
import { percentile, printJson, printTable } from './table.ts';
import { BACKCHANNELS, COMPLETE, OPEN, VOICES } from './_turn-corpus.ts';

const RATE = 16_000;
const HUMAN = '/usr/share/pocketsphinx/test/data/librivox';

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
  const engine = new TimedEngine();
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
      for (const id of ['0870', '0880', '0890', '0920', '0930']) {
        const b = readFileSync(`${HUMAN}/sense_and_sensibility_01_austen_64kb-${id}.wav`);
        const r = await transcribe(new Int16Array(b.buffer.slice(b.byteOffset + 44, b.byteOffset + b.length)));
        cpu.push(r.cpuMs);
        human++;
        rows.push({ voice: 'human (librivox)', said: id, heard: r.text, cue: textCue(r.text, 'en') });
      }
    }
    load.push(loadavg()[0]!);
    printTable(rows);
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
      load_avg: Math.round(Math.max(...load) * 100) / 100,
    };
    printTable(Object.entries(figures).map(([figure, value]) => ({ figure, value: String(value) })));
    printJson('moonshine_stt', figures);
  } finally {
    await engine.close();
  }
}
