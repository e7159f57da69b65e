/** Shared output helpers for benchmarks: an aligned table for people, a JSON line for machines. */

export function printTable(rows: ReadonlyArray<Record<string, string | number>>): void {
  if (rows.length === 0) return;
  const cols = Object.keys(rows[0]!);
  const cell = (v: string | number) => (typeof v === 'number' ? formatNumber(v) : v);
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c] ?? '').length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padStart(widths[i]!)).join('  ');
  console.log(line(cols));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of rows) console.log(line(cols.map((c) => cell(r[c] ?? ''))));
}

export function printJson(bench: string, figures: Record<string, unknown>): void {
  console.log(JSON.stringify({ bench, ...figures }));
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString('en-US');
  return v.toFixed(Math.abs(v) >= 100 ? 1 : Math.abs(v) >= 1 ? 2 : 3);
}
