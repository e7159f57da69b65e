/** Public surface of the vendor-neutral processors. */
export * from './services.ts';
export * from './provider-failure.ts';
export * from './vad/vad-processor.ts';
export * from './turns/index.ts';
export * from './stt/stt-processor.ts';
export * from './llm/context.ts';
export * from './llm/llm-processor.ts';
export * from './tts/sentence-aggregator.ts';
export * from './tts/tts-processor.ts';
export * from './aggregators/user-aggregator.ts';
export * from './aggregators/assistant-aggregator.ts';
export * from './behaviours/conversation-behaviours.ts';
export * from './avatar/face-model.ts';
export * from './avatar/avatar-processor.ts';
export * from './tools/index.ts';
export * from './tts/pcm-stream.ts';
export * from './tts/letter-sounds.ts';
