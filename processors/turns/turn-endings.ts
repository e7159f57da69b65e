/**
 * What the words say about a pause: a closed ending (terminal punctuation from a provider that
 * punctuates: the sentence is done), an open ending (a trailing conjunction, preposition,
 * article, auxiliary, possessive or filler: a clause cannot end there), or nothing either way.
 * And which short replies are backchannels ("uh-huh", "right": the listener is following, not
 * taking the turn). Word lists per language; a language without lists gives only punctuation.
 *
 * Text in square brackets is not words: STT providers (and the offline stand-in's
 * `[unrecognised speech]`) annotate noise and unknown speech that way.
 */

/**
 * English words no sentence ends on, even with a period after them (OPEN_THROUGH_PERIOD_WORDS):
 * conjunctions, prepositions that rarely end a sentence (stranded ones like "where are you from"
 * do), articles, determiners, possessives, fillers.
 */
const EN_NEVER_FINAL = [
  'and', 'but', 'or', 'because', 'if', 'when', 'while', 'although', 'though', 'than', 'which', 'whose', 'unless', 'nor', 'whether',
  'to', 'of', 'into', 'onto', 'between', 'through', 'towards', 'during', 'per', 'with', 'by', 'for', 'about',
  'a', 'an', 'the', 'my', 'your', 'our', 'their', 'every', 'each',
  'um', 'uh', 'er', 'erm', 'uhm', 'umm',
] as const;

/** Words after which an utterance cannot end (lower case, without punctuation). */
export const OPEN_ENDING_WORDS: Readonly<Record<string, readonly string[]>> = {
  en: [
    ...EN_NEVER_FINAL,
    // auxiliaries and modals
    'is', 'are', 'was', 'were', 'be', 'been', 'am', 'will', 'would', 'can', 'could', 'should', 'shall', 'might', 'must', "i'm", "it's", "i'd", "i'll", "we're", "you're", "don't", "can't", "won't",
    // pronouns that need a verb after them
    'i', 'we', 'they',
    // intensifiers
    'very', 'quite',
  ],
  fr: ['et', 'mais', 'ou', 'donc', 'car', 'parce', 'que', 'qui', 'si', 'quand', 'de', 'du', 'des', 'à', 'au', 'aux', 'en', 'dans', 'sur', 'pour', 'avec', 'par', 'le', 'la', 'les', 'un', 'une', 'mon', 'ma', 'mes', 'ton', 'ta', 'votre', 'notre', 'je', 'tu', 'il', 'elle', 'nous', 'vous', 'ils', 'est', 'suis', 'euh', 'ben', 'hum'],
  de: ['und', 'aber', 'oder', 'weil', 'dass', 'wenn', 'als', 'der', 'die', 'das', 'den', 'dem', 'ein', 'eine', 'einen', 'mein', 'meine', 'zu', 'von', 'mit', 'für', 'auf', 'in', 'an', 'bei', 'nach', 'ich', 'du', 'wir', 'ist', 'bin', 'habe', 'hat', 'äh', 'ähm'],
  es: ['y', 'pero', 'o', 'porque', 'que', 'si', 'cuando', 'de', 'del', 'a', 'al', 'en', 'con', 'por', 'para', 'el', 'la', 'los', 'las', 'un', 'una', 'mi', 'tu', 'su', 'yo', 'es', 'estoy', 'eh', 'este', 'pues'],
};

/** Backchannels: replies that say "go on", not "my turn" (lower case, without punctuation). */
export const BACKCHANNEL_WORDS: Readonly<Record<string, readonly string[]>> = {
  en: ['uh-huh', 'uh huh', 'uhhuh', 'mm-hm', 'mm-hmm', 'mhm', 'mm', 'mmm', 'hm', 'hmm', 'yeah', 'yes', 'yep', 'yup', 'right', 'okay', 'ok', 'sure', 'i see', 'oh', 'ah', 'wow', 'cool', 'great', 'alright', 'all right', 'got it', 'exactly', 'indeed', 'true', 'nice'],
  fr: ['oui', 'ouais', 'mm', 'hm', 'mhm', "d'accord", 'ok', 'okay', 'ah', 'oh', 'je vois', 'exactement', 'voilà', 'bien sûr', 'effectivement'],
  de: ['ja', 'jaja', 'mhm', 'mm', 'hm', 'okay', 'ok', 'genau', 'richtig', 'ach so', 'aha', 'stimmt', 'klar'],
  es: ['sí', 'si', 'ajá', 'aja', 'mm', 'mhm', 'vale', 'claro', 'ok', 'okay', 'ya', 'ah', 'oh', 'exacto', 'bueno'],
};

/**
 * Open-ending words that outweigh a final period: a sentence ends on none of them, so "I would like
 * a table for." is a recogniser closing every segment it is given (`stt:moonshine` does: it writes
 * "My name is." for "My name is,"), not a speaker who finished. Auxiliaries and pronouns are not
 * here ("Yes, I can." and "That is who I am." are whole sentences): with a period they say nothing
 * either way, and the prosody decides.
 */
export const OPEN_THROUGH_PERIOD_WORDS: Readonly<Record<string, readonly string[]>> = { en: EN_NEVER_FINAL };

export type TextCue = 'closed' | 'open' | 'none';

const baseLanguage = (language: string) => language.toLowerCase().split(/[-_]/)[0]!;

/** The transcript without bracketed annotations (`[noise]`, `[unrecognised speech]`). */
export function spokenWords(text: string): string {
  return text.replace(/\[[^\]]*\]/g, ' ').replace(/\s+/g, ' ').trim();
}

/** Lower-case words without the punctuation around them. */
function words(text: string): string[] {
  return spokenWords(text)
    .toLowerCase()
    .split(/\s+/)
    .map((w) => w.replace(/^[^\p{L}\p{N}']+|[^\p{L}\p{N}'-]+$/gu, ''))
    .filter(Boolean);
}

/**
 * What the end of `text` says: `closed`, `open`, or `none` (no words, or nothing either way).
 * `closingPunctuation: false` (an STT that closes every segment): a final `.` or `!` is not read,
 * the words before it still are (a trailing "for" is open, anything else says nothing); a `?`
 * still closes (the recogniser heard a question: measured in docs/behaviours.md).
 */
export function textCue(text: string, language: string, options: { readonly closingPunctuation?: boolean } = {}): TextCue {
  let spoken = spokenWords(text);
  if (options.closingPunctuation === false && !/(\.\.\.|…)["'”’)]*\s*$/.test(spoken)) spoken = spoken.replace(/[.!。！]+["'”’)]*\s*$/, '').trim();
  if (!spoken) return 'none';
  // Trailing commas, dashes and ellipses are a provider's way of saying the sentence goes on.
  if (/(,|;|:|-|–|—|\.\.\.|…)\s*$/.test(spoken)) return 'open';
  const last = words(spoken).at(-1);
  const base = baseLanguage(language);
  if (/[!?！？]["'”’)]*\s*$/.test(spoken)) return 'closed';
  if (/[.。]["'”’)]*\s*$/.test(spoken)) {
    const throughPeriod = OPEN_THROUGH_PERIOD_WORDS[base];
    if (!last || !throughPeriod) return 'closed';
    if (throughPeriod.includes(last)) return 'open';
    return OPEN_ENDING_WORDS[base]?.includes(last) ? 'none' : 'closed';
  }
  if (!last) return 'none';
  return OPEN_ENDING_WORDS[base]?.includes(last) ? 'open' : 'none';
}

/**
 * Whether `text` is only backchannel (every word, or the whole phrase, is in the list); false for
 * text with no words. `extra` adds words (an agent's own list), for every language.
 */
export function isBackchannel(text: string, language: string, extra: readonly string[] = []): boolean {
  const list = new Set([...(BACKCHANNEL_WORDS[baseLanguage(language)] ?? []), ...extra.map((w) => w.toLowerCase().trim())]);
  const ws = words(text);
  if (!ws.length) return false;
  if (list.has(ws.join(' '))) return true;
  return ws.every((w) => list.has(w));
}

/** Whether `text` holds any word (annotations in brackets are not words). */
export function hasWords(text: string): boolean {
  return words(text).length > 0;
}
