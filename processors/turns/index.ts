/** Turn taking: when the user's turn ends, false interruptions, preemptive replies. */
export * from './turn-endings.ts';
export * from './prosody.ts';
export * from './rule-turn-analyzer.ts';
export * from './turn-processor.ts';
export * from './reply-gate.ts';
