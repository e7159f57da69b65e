/**
 * Public surface of the agent layer: the voice pipeline (VAD, STT, LLM, TTS, output, and an
 * optional face) composed from parts, whole pipelines from an agent record (voice and
 * speech-to-speech), the session contract, the session message channel, and the bot
 * runner. Re-exports only. Importing it does not start WebRTC: the wrtc binding loads when a room
 * is first joined.
 */
export * from './voice-pipeline.ts';
export * from './agent-pipeline.ts';
export * from './s2s-pipeline.ts';
export * from './session-pipeline.ts';
export * from './session-contract.ts';
export * from './session-messages.ts';
export * from './appended-context.ts';
export * from './bot-room.ts';
export * from './bot-runner.ts';
