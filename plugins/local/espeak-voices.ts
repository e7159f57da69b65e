/**
 * Agent language codes -> eSpeak-NG voices. Codes are matched case-insensitively, region first
 * (`pt-BR` -> `pt-br`), then the base language (`fr-CA` -> `fr`). Codes not in the table are
 * tried as espeak language names directly, so any of espeak's ~130 languages works; the table
 * only fixes the cases where the obvious name is wrong or ambiguous.
 */
import type { EspeakVoice } from './espeak-engine.ts';
import { LocalEngineError } from './local-engine-error.ts';

/** The documented mapping (docs/offline-engines.md lists it). */
export const ESPEAK_VOICE_BY_LANGUAGE: Readonly<Record<string, string>> = {
  en: 'en-us',
  'en-us': 'en-us',
  'en-gb': 'en-gb',
  'en-au': 'en-gb',
  'en-in': 'en-gb',
  fr: 'fr',
  'fr-fr': 'fr',
  'fr-ca': 'fr',
  'fr-be': 'fr-be',
  'fr-ch': 'fr-ch',
  de: 'de',
  es: 'es',
  'es-es': 'es',
  'es-mx': 'es-419',
  'es-419': 'es-419',
  it: 'it',
  pt: 'pt',
  'pt-pt': 'pt',
  'pt-br': 'pt-br',
  nl: 'nl',
  pl: 'pl',
  ru: 'ru',
  uk: 'uk',
  cs: 'cs',
  sk: 'sk',
  sv: 'sv',
  da: 'da',
  no: 'nb',
  nb: 'nb',
  fi: 'fi',
  el: 'el',
  hu: 'hu',
  ro: 'ro',
  bg: 'bg',
  hr: 'hr',
  tr: 'tr',
  ar: 'ar',
  he: 'he',
  iw: 'he',
  hi: 'hi',
  id: 'id',
  ms: 'ms',
  vi: 'vi',
  ja: 'ja',
  ko: 'ko',
  zh: 'cmn',
  'zh-cn': 'cmn',
  'zh-tw': 'cmn',
  'zh-hk': 'yue',
  ca: 'ca',
};

/** Every language name the bundled voices answer to. */
export function espeakLanguageNames(voices: readonly EspeakVoice[]): Set<string> {
  return new Set(voices.flatMap((v) => v.languages.map((l) => l.name.toLowerCase())));
}

/**
 * The espeak voice for an agent language code. Throws `unsupported_language` (naming the codes of
 * the table) when espeak has no voice for it.
 */
export function espeakVoiceFor(language: string, voices: readonly EspeakVoice[]): string {
  const code = language.trim().toLowerCase().replace(/_/g, '-');
  const base = code.split('-')[0] ?? code;
  const known = espeakLanguageNames(voices);
  for (const candidate of [ESPEAK_VOICE_BY_LANGUAGE[code], code, ESPEAK_VOICE_BY_LANGUAGE[base], base]) {
    if (candidate && (known.has(candidate) || Object.values(ESPEAK_VOICE_BY_LANGUAGE).includes(candidate))) return candidate;
  }
  throw new LocalEngineError('unsupported_language', `the offline TTS has no voice for language "${language}"`, {
    language,
    supported: Object.keys(ESPEAK_VOICE_BY_LANGUAGE),
  });
}
