/**
 * An avatar voice bot that runs with no cloud key: offline VAD, speech-to-text stand-in,
 * responder and eSpeak TTS, plus the human-portrait face. It greets, hears a question (spoken
 * by the offline TTS, as a stand-in for a microphone), answers with a lip-synced face, and
 * writes what it said and showed to examples/out/.
 *
 *   npx tsx examples/offline-avatar-bot.ts
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { chunkAudio, concat, frame, PipelineWorker, RealClock, Registry, silence } from '../core/index.ts';
import { AvatarProcessor, createVoicePipeline, type FaceModel, type LLMService, type STTService, type TTSService, type VADAnalyzer } from '../processors/index.ts';
import { MemoryMediaSink } from '../transports/index.ts';
import { localPlugin } from '../plugins/local/index.ts';
import { facePlugin } from '../plugins/face/index.ts';

const registry = new Registry().use(localPlugin).use(facePlugin);
const face = registry.create<FaceModel>('face', 'human-portrait');
const tts = registry.create<TTSService>('tts', 'local');
const sink = new MemoryMediaSink();
const voice = createVoicePipeline({
  vad: registry.create<VADAnalyzer>('vad', 'local'),
  stt: registry.create<STTService>('stt', 'local'),
  llm: registry.create<LLMService>('llm', 'local'),
  tts,
  sink,
  language: 'en',
  systemPrompt: 'You are Ada, a friendly guide.',
  behaviours: { startsConversation: true, greeting: { text: 'Hello! I am Ada. Ask me anything.', mode: 'verbatim' } },
  beforeOutput: new AvatarProcessor((clock) => face.openSession({ configuration: { width: 640, height: 360 } }, clock)),
});
const clock = new RealClock();
const worker = new PipelineWorker(voice.pipeline, { clock, audioInSampleRate: 16_000, audioOutSampleRate: 16_000 });
const done = worker.run();

// The "microphone": a question spoken by the offline TTS, fed in real time after the greeting.
const question: Int16Array[] = [];
for await (const e of tts.synthesize({ text: 'Who are you?', sampleRate: 16_000 })) if (e.type === 'audio') question.push(e.pcm);
await clock.sleep(4000);
for (const chunk of chunkAudio(concat([concat(question), silence(1000, 16_000)]), 16_000, 20)) {
  worker.queueFrame(frame('input-audio', { pcm: chunk, sampleRate: 16_000, channels: 1 }));
  await clock.sleep(20);
}
await clock.sleep(6000);
await worker.end();
await done;

mkdirSync('examples/out', { recursive: true });
const pcm = concat(sink.audio.map((a) => a.pcm));
writeFileSync('examples/out/bot.wav', wav(pcm, 16_000));
const frames = sink.images.filter((_, i) => i % 25 === 0);
frames.forEach((f, i) => writeFileSync(`examples/out/frame-${String(i).padStart(3, '0')}.jpg`, f.image.data));
console.log(`conversation: ${voice.context.messages().map((m) => `${m.role}: ${m.content}`).join('\n              ')}`);
console.log(`wrote examples/out/bot.wav (${(pcm.length / 16).toFixed(0)} ms) and ${frames.length} frames`);
process.exit(0);

function wav(samples: Int16Array, rate: number): Buffer {
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + samples.byteLength, 4);
  header.write('WAVEfmt ', 8);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36);
  header.writeUInt32LE(samples.byteLength, 40);
  return Buffer.concat([header, Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength)]);
}
