/**
 * The one way to turn whatever was thrown into the text of a log line, an error frame or an
 * answer: an Error's message, anything else as a string (a thrown string, a number, `undefined`).
 */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
