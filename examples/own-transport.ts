/**
 * Bring your own transport (docs/own-transport.md): a bot whose input is a WAV file played in
 * real time and whose output is another WAV file, built from the two halves every transport has:
 *
 * - input: a processor placed first that pushes `input-audio` frames (here from a file, in 20 ms
 *   chunks paced on the pipeline's clock; a socket or a sound card works the same way);
 * - output: a `MediaSink` given to the voice pipeline, whose OutputTransport paces audio (and the
 *   avatar's images) at real time and tells the sink to `clear()` on barge-in.
 *
 * Offline engines only, so it runs without a key. Imports only the package's public entry points.
 *
 *   npx tsx examples/own-transport.ts [question.wav]
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { chunkAudio, concat, encodeWav, frame, FrameProcessor, PipelineRunner, RealClock, Resampler, silence, type Direction, type Frame } from 'svc-avatar/core';
import type { ImagePayload } from 'svc-avatar/core';
import { createVoicePipeline } from 'svc-avatar/agent';
import type { MediaSink } from 'svc-avatar/transports';
import { LocalPhraseSTT, LocalResponder, LocalTTSService, WebRtcVADAnalyzer } from 'svc-avatar/plugins/local';

const RATE = 16_000;

/** Input half: plays 16-bit mono PCM into the pipeline at real time, once the pipeline started. */
class PcmFileInput extends FrameProcessor {
  constructor(private readonly pcm: Int16Array, private readonly sampleRate: number) {
    super({ name: 'PcmFileInput' });
  }

  protected override process(f: Frame, direction: Direction): void {
    this.push(f, direction);
    // Start feeding after the start frame went by, so every processor below is ready.
    if (f.type === 'start') void this.feed();
  }

  private async feed(): Promise<void> {
    let due = this.clock.now();
    for (const chunk of chunkAudio(this.pcm, this.sampleRate, 20)) {
      // Absolute deadlines: a late timer does not make the input drift.
      due += 20;
      await this.clock.sleep(Math.max(0, due - this.clock.now()));
      this.push(frame('input-audio', { pcm: chunk, sampleRate: this.sampleRate, channels: 1 }));
    }
  }
}

/** Output half: keeps what the output transport writes, at its presentation time, for a WAV file. */
class WavFileSink implements MediaSink {
  private readonly chunks: Array<{ pcm: Int16Array; ptsMs: number }> = [];
  /** One resampler for the whole stream (it keeps state across chunks). */
  private resampler: Resampler | undefined;
  clears = 0;
  constructor(private readonly sampleRate: number) {}

  writeAudio(pcm: Int16Array, sampleRate: number, ptsMs: number): void {
    if (sampleRate !== this.sampleRate) this.resampler ??= new Resampler(sampleRate, this.sampleRate);
    const resampled = this.resampler ? this.resampler.process(pcm) : pcm;
    this.chunks.push({ pcm: resampled, ptsMs });
  }

  writeImage(_image: ImagePayload, _ptsMs: number): void {
    // An audio-only transport ignores images (a video transport would encode them here).
  }

  clear(): void {
    // Barge-in: a transport with its own buffer (a jitter buffer, a sound card) drops it here.
    this.clears++;
  }

  sendMessage(message: Readonly<Record<string, unknown>>): void {
    if (message.type === 'transcript-turn') console.log(`  [${String(message.owner)}] ${String(message.text)}`);
  }

  save(path: string): number {
    const pcm = concat(this.chunks.map((c) => c.pcm));
    writeFileSync(path, encodeWav(pcm, this.sampleRate));
    return (pcm.length / this.sampleRate) * 1000;
  }
}

const tts = new LocalTTSService();
const question = process.argv[2] && existsSync(process.argv[2]) ? readWav(process.argv[2]) : await spoken('What can you do?');
const sink = new WavFileSink(RATE);
const voice = createVoicePipeline({
  input: new PcmFileInput(concat([silence(500, RATE), question, silence(1500, RATE)]), RATE),
  vad: new WebRtcVADAnalyzer(),
  stt: new LocalPhraseSTT(),
  llm: new LocalResponder(),
  tts,
  sink,
  language: 'en',
  systemPrompt: 'You are Ada.',
});
const bot = new PipelineRunner(voice.processors, { clock: new RealClock(), audioInSampleRate: RATE, audioOutSampleRate: RATE, handleSignals: true });
const done = bot.run();
await new Promise((resolve) => setTimeout(resolve, question.length / 16 + 12_000));
await bot.end();
console.log(`outcome: ${JSON.stringify(await done)}`);
mkdirSync('examples/out', { recursive: true });
console.log(`wrote examples/out/own-transport.wav (${Math.round(sink.save('examples/out/own-transport.wav'))} ms)`);

async function spoken(text: string): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of tts.synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts);
}

/** 16-bit PCM WAV, mono or first channel, resampled to RATE. */
function readWav(path: string): Int16Array {
  const bytes = readFileSync(path);
  const channels = bytes.readUInt16LE(22);
  const rate = bytes.readUInt32LE(24);
  const data = bytes.indexOf('data', 12);
  const samples = new Int16Array(bytes.buffer.slice(bytes.byteOffset + data + 8, bytes.byteOffset + bytes.length - ((bytes.length - data - 8) % 2)));
  const mono = channels === 1 ? samples : samples.filter((_, i) => i % channels === 0);
  return rate === RATE ? mono : new Resampler(rate, RATE).process(mono);
}
