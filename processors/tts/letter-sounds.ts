/**
 * Timed characters -> timed sounds, for TTS providers that time the characters of the text they
 * speak (ElevenLabs' alignment) but report no phonemes. The face's mouth wants sounds: the lips
 * close on m, b, p, tuck on f, v, round on oo, o, w and spread on ee. English spelling is only a
 * rough guide to sound, but the mouth needs only the visible classes, and those follow spelling
 * well: a letter-to-sound pass (longest spelling first, a few context rules: silent letters,
 * magic e, soft c and g, doubled consonants) plus a short list of common words whose spelling
 * lies (of, one, the, you, ...). Each sound takes the span of the characters that spell it; a
 * silent letter's time goes to the sound before it. Output is IPA, as eSpeak-NG's is, so the
 * face's viseme table reads it unchanged.
 *
 * Words are converted when they are complete (the character after them is known), which is also
 * when a streaming TTS may release the audio they start in: `LetterSounds.pendingStartMs`.
 */
import type { PhonemeTiming } from '../../core/frames.ts';

export interface TimedCharacter {
  readonly char: string;
  readonly startMs: number;
  readonly endMs: number;
}

/** Common words whose spelling misleads the rules (IPA, one entry per sound). */
const WORDS: Readonly<Record<string, readonly string[]>> = {
  a: ['ə'], i: ['a', 'ɪ'], the: ['ð', 'ə'], of: ['ʌ', 'v'], to: ['t', 'u'], do: ['d', 'u'], who: ['h', 'u'], you: ['j', 'u'],
  your: ['j', 'ɔ', 'ɹ'], one: ['w', 'ʌ', 'n'], once: ['w', 'ʌ', 'n', 's'], two: ['t', 'u'], was: ['w', 'ʌ', 'z'],
  what: ['w', 'ʌ', 't'], are: ['ɑ', 'ɹ'], have: ['h', 'æ', 'v'], give: ['ɡ', 'ɪ', 'v'], live: ['l', 'ɪ', 'v'], love: ['l', 'ʌ', 'v'],
  move: ['m', 'u', 'v'], some: ['s', 'ʌ', 'm'], come: ['k', 'ʌ', 'm'], done: ['d', 'ʌ', 'n'], none: ['n', 'ʌ', 'n'],
  said: ['s', 'ɛ', 'd'], says: ['s', 'ɛ', 'z'], could: ['k', 'ʊ', 'd'], would: ['w', 'ʊ', 'd'], should: ['ʃ', 'ʊ', 'd'],
  put: ['p', 'ʊ', 't'], push: ['p', 'ʊ', 'ʃ'], pull: ['p', 'ʊ', 'l'], full: ['f', 'ʊ', 'l'], good: ['ɡ', 'ʊ', 'd'], book: ['b', 'ʊ', 'k'],
  look: ['l', 'ʊ', 'k'], took: ['t', 'ʊ', 'k'], been: ['b', 'ɪ', 'n'], there: ['ð', 'ɛ', 'ɹ'], where: ['w', 'ɛ', 'ɹ'], were: ['w', 'ɝ'],
  here: ['h', 'ɪ', 'ɹ'], eye: ['a', 'ɪ'], buy: ['b', 'a', 'ɪ'], by: ['b', 'a', 'ɪ'], my: ['m', 'a', 'ɪ'], why: ['w', 'a', 'ɪ'],
  people: ['p', 'i', 'p', 'ə', 'l'], friend: ['f', 'ɹ', 'ɛ', 'n', 'd'], any: ['ɛ', 'n', 'i'], many: ['m', 'ɛ', 'n', 'i'],
  does: ['d', 'ʌ', 'z'], goes: ['ɡ', 'oʊ', 'z'], shoe: ['ʃ', 'u'], lose: ['l', 'u', 'z'], whose: ['h', 'u', 'z'], whom: ['h', 'u', 'm'],
  women: ['w', 'ɪ', 'm', 'ɪ', 'n'], woman: ['w', 'ʊ', 'm', 'ə', 'n'], ocean: ['oʊ', 'ʃ', 'ə', 'n'], only: ['oʊ', 'n', 'l', 'i'],
  other: ['ʌ', 'ð', 'ɚ'], mother: ['m', 'ʌ', 'ð', 'ɚ'], brother: ['b', 'ɹ', 'ʌ', 'ð', 'ɚ'], money: ['m', 'ʌ', 'n', 'i'],
  know: ['n', 'oʊ'], now: ['n', 'aʊ'], how: ['h', 'aʊ'], new: ['n', 'u'], view: ['v', 'j', 'u'], very: ['v', 'ɛ', 'ɹ', 'i'],
  ok: ['oʊ', 'k', 'eɪ'], okay: ['oʊ', 'k', 'eɪ'], movie: ['m', 'u', 'v', 'i'], prove: ['p', 'ɹ', 'u', 'v'], above: ['ə', 'b', 'ʌ', 'v'],
};

const VOWELS = new Set(['a', 'e', 'i', 'o', 'u', 'y']);
const isVowel = (c: string | undefined) => c !== undefined && VOWELS.has(c) && c !== 'y';
const isConsonant = (c: string | undefined) => c !== undefined && /[a-z]/.test(c) && !isVowel(c);

/** A spelling at `i` of `w`: how many letters it takes and the sounds it makes ([] = silent). */
type Rule = (w: string, i: number) => readonly [length: number, sounds: readonly string[]] | undefined;

const at = (w: string, i: number, s: string) => w.startsWith(s, i);
/** A vowel made long by a silent final e after one consonant ("make", "note", "tube"). */
const magicE = (w: string, i: number) =>
  isConsonant(w[i + 1]) && w[i + 2] === 'e' && (i + 3 === w.length || (i + 4 === w.length && /[sd]/.test(w[i + 3]!))) && w[i + 1] !== 'w' && w[i + 1] !== 'x';
const LONG: Readonly<Record<string, readonly string[]>> = { a: ['eɪ'], e: ['i'], i: ['a', 'ɪ'], o: ['oʊ'], u: ['u'], y: ['a', 'ɪ'] };
const SHORT: Readonly<Record<string, readonly string[]>> = { a: ['æ'], e: ['ɛ'], i: ['ɪ'], o: ['ɒ'], u: ['ʌ'] };
const CONSONANT: Readonly<Record<string, readonly string[]>> = {
  b: ['b'], d: ['d'], f: ['f'], h: ['h'], j: ['d', 'ʒ'], k: ['k'], l: ['l'], m: ['m'], n: ['n'], p: ['p'], q: ['k'], r: ['ɹ'],
  s: ['s'], t: ['t'], v: ['v'], w: ['w'], z: ['z'],
};

/** Spellings, longest first; each answers only where its context holds. */
const RULES: readonly Rule[] = [
  (w, i) => (at(w, i, 'eau') ? [3, ['j', 'u']] : undefined),
  (w, i) => (at(w, i, 'tch') ? [3, ['t', 'ʃ']] : undefined),
  (w, i) => (at(w, i, 'dge') ? [3, ['d', 'ʒ']] : undefined),
  (w, i) => (at(w, i, 'igh') ? [3, ['a', 'ɪ']] : undefined),
  (w, i) => (at(w, i, 'eigh') ? [4, ['eɪ']] : undefined),
  (w, i) => (at(w, i, 'augh') || at(w, i, 'ough') ? [4, w[i] === 'a' ? ['ɔ'] : ['oʊ']] : undefined),
  (w, i) => (at(w, i, 'sch') ? [3, ['s', 'k']] : undefined),
  (w, i) => (at(w, i, 'tion') || at(w, i, 'sion') ? [4, ['ʃ', 'ə', 'n']] : undefined),
  // Silent first letters.
  (w, i) => (i === 0 && (at(w, i, 'kn') || at(w, i, 'gn')) ? [2, ['n']] : undefined),
  (w, i) => (i === 0 && at(w, i, 'wr') ? [2, ['ɹ']] : undefined),
  (w, i) => (i === 0 && at(w, i, 'ps') ? [2, ['s']] : undefined),
  // Silent b after m at the end ("climb", "thumb") and before t ("debt").
  (w, i) => (at(w, i, 'mb') && i + 2 === w.length ? [2, ['m']] : undefined),
  (w, i) => (at(w, i, 'bt') && i + 2 === w.length ? [2, ['t']] : undefined),
  (w, i) => (at(w, i, 'ch') ? [2, ['t', 'ʃ']] : undefined),
  (w, i) => (at(w, i, 'sh') ? [2, ['ʃ']] : undefined),
  (w, i) => (at(w, i, 'th') ? [2, ['θ']] : undefined),
  (w, i) => (at(w, i, 'ph') ? [2, ['f']] : undefined),
  (w, i) => (at(w, i, 'wh') ? [2, ['w']] : undefined),
  (w, i) => (at(w, i, 'ck') ? [2, ['k']] : undefined),
  (w, i) => (at(w, i, 'ng') ? [2, ['ŋ']] : undefined),
  (w, i) => (at(w, i, 'qu') ? [2, ['k', 'w']] : undefined),
  (w, i) => (at(w, i, 'gh') ? [2, i === 0 ? ['ɡ'] : []] : undefined),
  // Vowel spellings.
  (w, i) => (at(w, i, 'oo') ? [2, ['u']] : undefined),
  (w, i) => (at(w, i, 'ee') || at(w, i, 'ea') ? [2, ['i']] : undefined),
  (w, i) => (at(w, i, 'ie') ? [2, i + 2 === w.length && w.length <= 3 ? ['a', 'ɪ'] : ['i']] : undefined),
  (w, i) => (at(w, i, 'ey') && i + 2 === w.length ? [2, w.length <= 3 ? ['eɪ'] : ['i']] : undefined),
  (w, i) => (at(w, i, 'ei') || at(w, i, 'ai') || at(w, i, 'ay') || at(w, i, 'ey') ? [2, ['eɪ']] : undefined),
  (w, i) => (at(w, i, 'oa') ? [2, ['oʊ']] : undefined),
  (w, i) => (at(w, i, 'ow') ? [2, i + 2 === w.length || isConsonant(w[i + 2]) && w[i + 2] !== 'n' ? ['oʊ'] : ['aʊ']] : undefined),
  (w, i) => (at(w, i, 'ou') ? [2, ['aʊ']] : undefined),
  (w, i) => (at(w, i, 'oi') || at(w, i, 'oy') ? [2, ['ɔ', 'ɪ']] : undefined),
  (w, i) => (at(w, i, 'au') || at(w, i, 'aw') ? [2, ['ɔ']] : undefined),
  (w, i) => (at(w, i, 'ew') || at(w, i, 'ue') || at(w, i, 'ui') ? [2, ['u']] : undefined),
  (w, i) => (at(w, i, 'ar') && !isVowel(w[i + 2]) ? [2, ['ɑ', 'ɹ']] : undefined),
  (w, i) => (at(w, i, 'or') && !isVowel(w[i + 2]) ? [2, ['ɔ', 'ɹ']] : undefined),
  (w, i) => ((at(w, i, 'er') || at(w, i, 'ir') || at(w, i, 'ur')) && !isVowel(w[i + 2]) ? [2, ['ɝ']] : undefined),
  // Doubled consonants are one sound.
  (w, i) => (isConsonant(w[i]) && w[i + 1] === w[i] && w[i] !== 'c' ? [2, CONSONANT[w[i]!] ?? []] : undefined),
  // Single letters.
  (w, i) => {
    const c = w[i]!;
    if (c === 'e' && i === w.length - 1) return [1, w.length <= 3 && !/[aiouy]/.test(w.slice(0, i)) ? ['i'] : []];
    if (c === 'e' && i === w.length - 2 && w[i + 1] === 'd' && /[^aeiou]/.test(w[i - 1] ?? 'a') && !/[td]/.test(w[i - 1] ?? '')) return [1, []];
    if (c === 'y') return [1, i === 0 ? ['j'] : i === w.length - 1 ? (w.length <= 3 ? ['a', 'ɪ'] : ['i']) : ['ɪ']];
    if (isVowel(c)) {
      if (magicE(w, i)) return [1, LONG[c]!];
      if (c === 'o' && i === w.length - 1) return [1, ['oʊ']];
      // "old", "bolt"; an open syllable ("over", "open", "total").
      if (c === 'o' && (at(w, i + 1, 'ld') || at(w, i + 1, 'lt') || (isConsonant(w[i + 1]) && isVowel(w[i + 2]) && i + 3 < w.length))) return [1, ['oʊ']];
      if (c === 'a' && i === w.length - 1) return [1, ['ə']];
      return [1, SHORT[c]!];
    }
    if (c === 'c') return [1, /[eiy]/.test(w[i + 1] ?? '') ? ['s'] : ['k']];
    if (c === 'g') return [1, i === w.length - 2 && w[i + 1] === 'e' ? ['d', 'ʒ'] : ['ɡ']];
    if (c === 'x') return [1, i === 0 ? ['z'] : ['k', 's']];
    return [1, CONSONANT[c] ?? []];
  },
];

/** The sounds of one word (lower-case letters only), each with the letters [from, to) spelling it. */
export function spellSounds(word: string): { sounds: readonly string[]; from: number; to: number }[] {
  const known = WORDS[word];
  if (known) return [{ sounds: known, from: 0, to: word.length }];
  const out: { sounds: readonly string[]; from: number; to: number }[] = [];
  for (let i = 0; i < word.length;) {
    let hit: readonly [number, readonly string[]] | undefined;
    for (const rule of RULES) if ((hit = rule(word, i))) break;
    const [length, sounds] = hit ?? [1, []];
    out.push({ sounds, from: i, to: i + length });
    i += length;
  }
  return out;
}

/**
 * One word's timed characters -> timed sounds. Letters are the word's a-z (case and accents
 * folded); other characters (apostrophes, digits) keep their time for the sounds around them.
 */
export function wordSounds(chars: readonly TimedCharacter[]): PhonemeTiming[] {
  const letters: TimedCharacter[] = [];
  for (const c of chars) {
    const folded = c.char.normalize('NFD').replace(/[\u0300-\u036f]/g, '').toLowerCase();
    if (/^[a-z]$/.test(folded)) letters.push({ ...c, char: folded });
  }
  if (!letters.length) return [];
  const word = letters.map((c) => c.char).join('');
  const out: PhonemeTiming[] = [];
  for (const { sounds, from, to } of spellSounds(word)) {
    const startMs = letters[from]!.startMs, endMs = letters[to - 1]!.endMs;
    if (!sounds.length) {
      // A silent letter: its time belongs to the sound before it (or the next one, first).
      const last = out.at(-1);
      if (last) out[out.length - 1] = { ...last, endMs: Math.max(last.endMs, endMs) };
      continue;
    }
    // A word from the list spans all its letters: its sounds share the time (vowels twice).
    const weights = sounds.map((s) => (/^[aeiouɑæɒɔəɛɪʊʌɝɚ]/u.test(s) ? 2 : 1));
    let t = out.length === 0 ? letters[0]!.startMs : startMs;
    sounds.forEach((phoneme, k) => {
      const end = k === sounds.length - 1 ? endMs : t + ((endMs - t) * weights[k]!) / weights.slice(k).reduce((a, b) => a + b, 0);
      out.push({ phoneme, startMs: t, endMs: Math.max(t, end) });
      t = end;
    });
  }
  return out;
}

/**
 * A streaming converter: characters arrive in chunks; each complete word (closed by a space or
 * punctuation) is turned into sounds at once. `pendingStartMs` is where the unfinished word
 * starts: audio before it can be released, since its sounds are known.
 */
export class LetterSounds {
  private word: TimedCharacter[] = [];

  /** Adds characters; returns the sounds of the words they complete. */
  push(chars: readonly TimedCharacter[]): PhonemeTiming[] {
    const out: PhonemeTiming[] = [];
    for (const c of chars) {
      if (/^[\p{L}\p{M}'’]$/u.test(c.char)) this.word.push(c);
      else out.push(...this.take());
    }
    return out;
  }

  get pendingStartMs(): number | undefined {
    return this.word[0]?.startMs;
  }

  flush(): PhonemeTiming[] {
    return this.take();
  }

  private take(): PhonemeTiming[] {
    if (!this.word.length) return [];
    const sounds = wordSounds(this.word);
    this.word = [];
    return sounds;
  }
}
