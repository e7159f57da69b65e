/** Process-wide admission by capacity (face sessions, bots) and the REST API's load shedding: see capacity-gate.ts and rest-guard.ts. */
export * from './capacity-gate.ts';
export * from './load-meter.ts';
export * from './rest-guard.ts';
