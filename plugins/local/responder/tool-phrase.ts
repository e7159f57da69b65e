/**
 * The documented phrase that makes the offline responder call a tool:
 *
 *   "call tool get_weather with city Paris and days 3"
 *   "use get weather with city Paris"          (spoken names: underscores may be spaces)
 *   "call get_weather with {"city": "Paris"}"  (JSON arguments)
 *   French "appelle / utilise ... avec", German "rufe / benutze / verwende ... mit",
 *   Spanish "llama / usa ... con".
 *
 * Arguments are read as `<property> <value>` pairs separated by "and" / "," (et, und, y), the
 * property names taken from the tool's schema, and the values coerced to the schema's type.
 */
import type { ToolDefinition } from '../../../processors/services.ts';

export type ToolPhrase =
  | { readonly kind: 'call'; readonly tool: ToolDefinition; readonly arguments: Record<string, unknown> }
  | { readonly kind: 'missing-arguments'; readonly tool: ToolDefinition; readonly missing: readonly string[] }
  | { readonly kind: 'unknown-tool' };

const CALL_VERB = /\b(?:call|use|run|invoke|trigger|appelle|appeler|utilise|utiliser|lance|rufe|ruf|benutze|verwende|nutze|llama|llamar|usa|usar|ejecuta)\b/iu;
const TOOL_WORD = /\b(?:tool|function|outil|fonction|werkzeug|funktion|herramienta|función|funcion)\b/iu;
const ARGUMENTS_START = /^\s*(?:(?:tool|function|outil|fonction|werkzeug|funktion|herramienta|función)\s+)?(?:with|avec|mit|con)\b/iu;
const PAIR_SEPARATOR = /\s*(?:,|;|\band\b|\bet\b|\bund\b|\by\b)\s*/iu;
const VALUE_LEAD = /^\s*(?:=|:|is\b|of\b|equals\b|est\b|ist\b|es\b|de\b)?\s*/iu;

/** Spoken form of an identifier: `get_weather` / `getWeather` -> `get weather`. */
export function spokenName(identifier: string): string {
  return identifier
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/[_\-.]+/g, ' ')
    .trim()
    .toLowerCase();
}

/** Reads a tool-call phrase out of the user's words, or undefined when there is none. */
export function parseToolPhrase(text: string, tools: readonly ToolDefinition[]): ToolPhrase | undefined {
  if (!CALL_VERB.test(text)) return undefined;
  // Matching is done in lower case; values are cut from the same string with the user's case.
  const cased = spokenText(text);
  const spoken = cased.toLowerCase();
  // Longest names first so `get_weather_forecast` wins over `get_weather`.
  const byLength = [...tools].sort((a, b) => spokenName(b.name).length - spokenName(a.name).length);
  for (const tool of byLength) {
    const name = spokenName(tool.name);
    const at = findWords(spoken, name);
    if (at < 0) continue;
    const rest = cased.slice(at + name.length);
    return buildCall(tool, ARGUMENTS_START.test(rest) ? rest.replace(ARGUMENTS_START, '') : '', jsonArguments(text));
  }
  return TOOL_WORD.test(text) && tools.length > 0 ? { kind: 'unknown-tool' } : undefined;
}

function buildCall(tool: ToolDefinition, argumentText: string, json: Record<string, unknown> | undefined): ToolPhrase {
  const properties = tool.parameters.properties as Record<string, { type?: string; enum?: unknown[]; default?: unknown }>;
  const args: Record<string, unknown> = {};
  if (json) {
    for (const [key, value] of Object.entries(json)) if (key in properties) args[key] = coerce(value, properties[key]!);
  } else {
    for (const [key, raw] of readPairs(argumentText, Object.keys(properties))) args[key] = coerce(raw, properties[key]!);
  }
  for (const [key, schema] of Object.entries(properties)) {
    if (args[key] === undefined && schema.default !== undefined) args[key] = schema.default;
  }
  const missing = (tool.parameters.required ?? []).filter((key) => args[key] === undefined);
  return missing.length > 0 ? { kind: 'missing-arguments', tool, missing } : { kind: 'call', tool, arguments: args };
}

/** `<property> <value>` pairs; a value runs to the next separator or property name. */
function readPairs(text: string, keys: readonly string[]): Array<[string, string]> {
  const found: Array<{ key: string; at: number; end: number }> = [];
  const lower = text.toLowerCase();
  for (const key of keys) {
    const name = spokenName(key);
    const at = findWords(lower, name);
    if (at >= 0) found.push({ key, at, end: at + name.length });
  }
  found.sort((a, b) => a.at - b.at);
  return found.flatMap(({ key, end }, i): Array<[string, string]> => {
    const until = found[i + 1]?.at ?? text.length;
    const value = text.slice(end, until).replace(VALUE_LEAD, '').split(PAIR_SEPARATOR)[0]!.trim();
    return value ? [[key, value]] : [];
  });
}

function coerce(value: unknown, schema: { type?: string; enum?: unknown[] }): unknown {
  if (schema.enum) {
    const match = schema.enum.find((option) => String(option).toLowerCase() === String(value).toLowerCase());
    if (match !== undefined) return match;
  }
  switch (schema.type) {
    case 'number':
    case 'integer': {
      const n = typeof value === 'number' ? value : Number.parseFloat(String(value).replace(',', '.'));
      if (Number.isNaN(n)) return undefined;
      return schema.type === 'integer' ? Math.round(n) : n;
    }
    case 'boolean':
      if (typeof value === 'boolean') return value;
      if (/^(?:true|yes|on|oui|vrai|ja|wahr|sí|si|verdadero)$/i.test(String(value))) return true;
      if (/^(?:false|no|off|non|faux|nein|falsch|falso)$/i.test(String(value))) return false;
      return undefined;
    case 'array':
      return Array.isArray(value) ? value : String(value).split(/\s+(?:and|et|und|y)\s+|,\s*/i).filter(Boolean);
    case 'object':
      return typeof value === 'object' && value !== null ? value : undefined;
    default:
      return String(value);
  }
}

/** The words as spoken: JSON and final punctuation dropped, identifiers split into words. */
function spokenText(text: string): string {
  return text
    .replace(/\{[\s\S]*\}/, ' ')
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/[_\-]+/g, ' ')
    .replace(/[.!?]+\s*$/, '')
    .replace(/\s+/g, ' ')
    .trim();
}

function jsonArguments(text: string): Record<string, unknown> | undefined {
  const match = /\{[\s\S]*\}/.exec(text);
  if (!match) return undefined;
  try {
    const value: unknown = JSON.parse(match[0]);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Index of `words` in `text` on word boundaries, or -1. */
function findWords(text: string, words: string): number {
  if (!words) return -1;
  const re = new RegExp(`(?:^|[^\\p{L}\\p{N}])(${words.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')})(?=$|[^\\p{L}\\p{N}])`, 'iu');
  const m = re.exec(text);
  return m ? m.index + m[0].length - m[1]!.length : -1;
}
