/** Contract suites any STT, LLM, TTS or speech-to-speech plugin runs against itself. */
export * from './check.ts';
export * from './stt.ts';
export * from './llm.ts';
export * from './tts.ts';
export * from './s2s.ts';
