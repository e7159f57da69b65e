/**
 * The slice of a logger the tool dispatcher needs. A pino logger satisfies it as is, so the
 * server passes its own; the default writes JSON lines through pino.
 */
import { pino } from 'pino';

export interface ToolLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

let fallback: ToolLogger | undefined;

export function defaultToolLogger(): ToolLogger {
  fallback ??= pino({ name: 'tools' });
  return fallback;
}
