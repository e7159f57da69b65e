/** Column values as the API shows them: pg and PGlite differ on bigint and timestamp types. */
export const iso = (value: Date | string | null | undefined): string | null =>
  value == null ? null : new Date(value).toISOString();

export const isoRequired = (value: Date | string): string => new Date(value).toISOString();

export const int = (value: number | string | bigint | null | undefined): number => Number(value ?? 0);
