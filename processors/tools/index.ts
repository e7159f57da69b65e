/** Tool calling: definitions for the model, the SSRF-guarded webhook client, the dispatcher. */
export * from './agent-tool.ts';
export * from './address-policy.ts';
export * from './call-plan.ts';
export * from './hangup-gate.ts';
export * from './tool-dispatcher.ts';
export * from './tool-logger.ts';
export * from './toolset.ts';
export * from './webhook-client.ts';
export * from './webhook-target.ts';
