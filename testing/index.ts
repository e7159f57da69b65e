/**
 * Public surface of the test kits shipped with the framework, for bot and plugin authors:
 * - the processor harness (frames in, frames out, both directions, on the virtual clock),
 * - the conversation harness (a pipeline driven by speech and time on the virtual clock),
 * - scripted stand-in services (VAD, STT, LLM, TTS) timed on the test's clock,
 * - `until` for real-time waits,
 * - contract suites every STT, LLM, TTS and speech-to-speech plugin runs against itself.
 * Runner-agnostic: failures are thrown Errors, so any test runner can use them.
 */
export * from '../core/testing/index.ts';
export * from './until.ts';
export * from './conversation.ts';
export * from './scripted-services.ts';
export * from './contracts/index.ts';
