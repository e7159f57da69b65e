/** Process-wide admission by capacity (face sessions, bots): see capacity-gate.ts. */
export * from './capacity-gate.ts';
