/** Public surface of the framework core. */
export * from './frames.ts';
export * from './clock.ts';
export * from './report-throttle.ts';
export * from './audio.ts';
export * from './processor.ts';
export * from './pipeline.ts';
export * from './parallel-pipeline.ts';
export * from './worker.ts';
export * from './observer.ts';
export * from './metrics.ts';
export * from './registry.ts';
export * from './runner.ts';
export * from './options.ts';
export * from './provider-error.ts';
export { errorMessage } from './error-message.ts';
