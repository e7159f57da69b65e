export * from './s2s-service.ts';
export * from './s2s-processor.ts';
export * from './playout.ts';
