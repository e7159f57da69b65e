/**
 * An avatar voice bot that runs with no cloud key: offline VAD, speech-to-text stand-in,
 * responder and eSpeak TTS, plus the human-portrait face. It greets, hears a question (spoken
 * by the offline TTS, as a stand-in for a microphone), answers with a lip-synced face, and
 * writes what it said and showed to examples/out/.
 *
 *   npx tsx examples/offline-avatar-bot.ts
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { chunkAudio, concat, encodeWav, frame, PipelineRunner, RealClock, Registry, silence } from 'svc-avatar/core';
import { AvatarProcessor, type FaceModel, type LLMService, type STTService, type TTSService, type VADAnalyzer } from 'svc-avatar/processors';
import { createVoicePipeline } from 'svc-avatar/agent';
import { MemoryMediaSink } from 'svc-avatar/transports';
import { localPlugin } from 'svc-avatar/plugins/local';
import { facePlugin } from 'svc-avatar/plugins/face';

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
// The bot is the list voice.processors; the runner starts it, ends it (Ctrl-C too) and tears it down.
const bot = new PipelineRunner(voice.processors, { clock, audioInSampleRate: 16_000, audioOutSampleRate: 16_000, handleSignals: true });
const done = bot.run();

// The "microphone": a question spoken by the offline TTS, fed in real time after the greeting.
const question: Int16Array[] = [];
for await (const e of tts.synthesize({ text: 'Who are you?', sampleRate: 16_000 })) if (e.type === 'audio') question.push(e.pcm);
await clock.sleep(4000);
for (const chunk of chunkAudio(concat([concat(question), silence(1000, 16_000)]), 16_000, 20)) {
  bot.queueFrame(frame('input-audio', { pcm: chunk, sampleRate: 16_000, channels: 1 }));
  await clock.sleep(20);
}
await clock.sleep(6000);
await bot.end();
await done;

mkdirSync('examples/out', { recursive: true });
const pcm = concat(sink.audio.map((a) => a.pcm));
writeFileSync('examples/out/bot.wav', encodeWav(pcm, 16_000));
const frames = sink.images.filter((_, i) => i % 25 === 0);
frames.forEach((f, i) => writeFileSync(`examples/out/frame-${String(i).padStart(3, '0')}.jpg`, f.image.data));
console.log(`conversation: ${voice.context.messages().map((m) => `${m.role}: ${m.content}`).join('\n              ')}`);
console.log(`wrote examples/out/bot.wav (${(pcm.length / 16).toFixed(0)} ms) and ${frames.length} frames`);
process.exit(0);
