/** Column values as the API shows them: pg and PGlite differ on bigint and timestamp types. */
export const iso = (value: Date | string | null | undefined): string | null =>
  value == null ? null : new Date(value).toISOString();

/** Already `2026-01-31T12:00:00.000Z` (as SQL can format it): returned as is. */
const CANONICAL_ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

export const isoRequired = (value: Date | string): string =>
  typeof value === 'string' && CANONICAL_ISO.test(value) ? value : new Date(value).toISOString();

export const int = (value: number | string | bigint | null | undefined): number => Number(value ?? 0);
