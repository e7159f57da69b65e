/**
 * The public API reports (api-reports/, one per entry point) match the surface the build
 * declares. A failure lists what was added, removed or changed; if the change is deliberate,
 * run `npm run api-report` and commit the new reports with it.
 */
import test from 'ava';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiReports, REPORTS_DIR } from '../../scripts/api-report.ts';
import { buildOnce } from './build-once.ts';

/** Sections of a report: exported name -> declaration text. */
function sections(report: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of report.split(/^## /m).slice(1)) {
    const [name, ...body] = part.split('\n');
    out.set(name!.trim(), body.join('\n').trim());
  }
  return out;
}

/** A readable difference between the checked-in report and the built one. */
function difference(file: string, checkedIn: string, built: string): string {
  const before = sections(checkedIn);
  const after = sections(built);
  const lines: string[] = [`${file}:`];
  for (const name of after.keys()) if (!before.has(name)) lines.push(`  + ${name} (new export)`);
  for (const name of before.keys()) if (!after.has(name)) lines.push(`  - ${name} (no longer exported)`);
  for (const [name, text] of after) {
    const old = before.get(name);
    if (old === undefined || old === text) continue;
    const a = old.split('\n');
    const b = text.split('\n');
    lines.push(`  ~ ${name} changed:`);
    for (const l of a) if (!b.includes(l)) lines.push(`      - ${l.trim()}`);
    for (const l of b) if (!a.includes(l)) lines.push(`      + ${l.trim()}`);
  }
  if (lines.length === 1) lines.push('  (header or order changed)');
  return lines.join('\n');
}

test('every entry point has a checked-in API report equal to the built surface', (t) => {
  buildOnce();
  const built = apiReports();
  const differences: string[] = [];
  for (const [file, text] of built) {
    const path = join(REPORTS_DIR, file);
    if (!existsSync(path)) differences.push(`${file}: missing (a new entry point)`);
    else if (readFileSync(path, 'utf8') !== text) differences.push(difference(file, readFileSync(path, 'utf8'), text));
  }
  for (const file of readdirSync(REPORTS_DIR)) if (!built.has(file)) differences.push(`${file}: no such entry point any more`);
  t.deepEqual(differences, [], `The public API changed. If that is deliberate, run \`npm run api-report\` and commit api-reports/.\n\n${differences.join('\n\n')}`);
});

test('the report shows signatures, not just names, and leaves out private members and comments', (t) => {
  buildOnce();
  const core = sections(apiReports().get('core.api.md')!);
  const processor = core.get('FrameProcessor')!;
  t.regex(processor, /push\(frame: Frame, direction\?: Direction\): void;/);
  t.regex(processor, /protected process\(/, 'protected members are part of the surface a subclass sees');
  t.notRegex(processor, /^\s+private /m);
  t.notRegex(processor, /\/\*\*/);
  t.false(core.has('WorkerSource'), 'an unexported class of core/worker.ts is not in the report');
});

test('members marked @internal are stripped from the declarations, so they are not in the report', (t) => {
  buildOnce();
  const worker = sections(apiReports().get('core.api.md')!).get('PipelineWorker')!;
  t.regex(worker, /interrupt\(\): void;/);
  t.notRegex(worker, /fromUpstream|fromDownstream/, 'the source and sink callbacks of the worker are internal');
});
