/**
 * Phoneme -> mouth shape (viseme), for TTS engines that report phoneme timings (eSpeak-NG's
 * IPA, ARPAbet from others). Each sound gets the lip and jaw posture a viewer expects of it, and
 * how strongly it holds that posture against its neighbours (coarticulation, articulation.ts):
 * lips close on bilabials, tuck under the upper teeth on labiodentals, round and push forward on
 * rounded vowels and /w/, spread on front vowels; tongue consonants (t, d, k, s, ...) take their
 * lip shape from the vowels around them.
 *
 * Accepts IPA strings of one or more sounds (espeak joins some: `ɔːɹ`, `əl`, diphthongs `aɪ`,
 * affricates `tʃ`), with length, stress and diacritic marks, and ARPAbet (`M`, `UW1`, `uw`).
 */

export interface Viseme {
  /** Jaw and lip opening this sound asks for, 0 (closed) .. 1 (widest vowel). */
  readonly open: number;
  /** Lips pressed together over the whole mouth width (m, b, p). */
  readonly closed: boolean;
  /** Lips rounded and pushed forward, 0..1 (u, o, w; a little on sh). */
  readonly round: number;
  /** Lips spread, 0..1 (i, e). */
  readonly spread: number;
  /** Lower lip tucked under the upper teeth, 0..1 (f, v). */
  readonly tuck: number;
  /** How strongly the lip shape (round, spread, tuck) resists the neighbours' (a weight, ~0..2.2). */
  readonly lipDominance: number;
  /** How strongly the opening resists the neighbours' (a weight; 1 for vowels). */
  readonly jawDominance: number;
  /** A pause (no sound). */
  readonly silent: boolean;
}

/** A viseme over a time span of the turn (ms from its first sample). */
export interface VisemeSegment {
  readonly startMs: number;
  readonly endMs: number;
  readonly viseme: Viseme;
}

const v = (open: number, o: Partial<Omit<Viseme, 'open'>> = {}): Viseme => ({
  open, closed: false, round: 0, spread: 0, tuck: 0, lipDominance: 0.15, jawDominance: 0.5, silent: false, ...o,
});
const vowel = (open: number, round = 0, spread = 0) => v(open, { round, spread, lipDominance: round ? 1 : spread ? 1.2 : 0.5, jawDominance: 1 });

export const SILENT_VISEME: Viseme = v(0, { silent: true, lipDominance: 0.4, jawDominance: 0.8 });
export const NEUTRAL_VISEME: Viseme = v(0.35);

/** IPA base symbols. */
const IPA: Readonly<Record<string, Viseme>> = {
  // Bilabials: closed over the full width; they hold the jaw, not the lip shape (rounding in
  // "boo" carries over the b).
  m: v(0, { closed: true, jawDominance: 1, lipDominance: 0.3 }),
  b: v(0, { closed: true, jawDominance: 1, lipDominance: 0.3 }),
  p: v(0, { closed: true, jawDominance: 1, lipDominance: 0.3 }),
  ʙ: v(0, { closed: true, jawDominance: 1, lipDominance: 0.3 }),
  // Labiodentals: the lower lip under the upper teeth.
  f: v(0.12, { tuck: 1, lipDominance: 1, jawDominance: 0.9 }),
  v: v(0.12, { tuck: 1, lipDominance: 1, jawDominance: 0.9 }),
  ɱ: v(0.1, { tuck: 1, lipDominance: 1, jawDominance: 0.9 }),
  // Rounded approximants: short, and rounder than any vowel (they pull hardest).
  w: v(0.15, { round: 1, lipDominance: 2.2, jawDominance: 0.8 }),
  ʍ: v(0.15, { round: 1, lipDominance: 2.2, jawDominance: 0.8 }),
  ɥ: v(0.15, { round: 1, lipDominance: 2.2, jawDominance: 0.8 }),
  // Vowels: rounded.
  u: vowel(0.3, 1), ʊ: vowel(0.38, 0.8), o: vowel(0.5, 0.9), ɔ: vowel(0.62, 0.75), ɒ: vowel(0.8, 0.45),
  y: vowel(0.28, 0.9), ʏ: vowel(0.33, 0.8), ø: vowel(0.45, 0.85), œ: vowel(0.6, 0.6), ɵ: vowel(0.42, 0.6), ɞ: vowel(0.55, 0.5),
  // Vowels: spread (front).
  i: vowel(0.3, 0, 1), ɪ: vowel(0.38, 0, 0.75), e: vowel(0.48, 0, 0.85), ɛ: vowel(0.6, 0, 0.6), æ: vowel(0.82, 0, 0.5),
  ᵻ: vowel(0.38, 0, 0.5), ɨ: vowel(0.35, 0, 0.3), ʉ: vowel(0.32, 0.6),
  // Vowels: open and central.
  a: vowel(1), ɑ: vowel(1), ɐ: vowel(0.75), ʌ: vowel(0.72), ə: vowel(0.45), ɜ: vowel(0.55, 0, 0.1), ɚ: vowel(0.45, 0.3), ɝ: vowel(0.5, 0.3),
  ɤ: vowel(0.45), ɯ: vowel(0.3, 0, 0.3),
  // Sibilants: teeth nearly together; postalveolars push the lips forward.
  s: v(0.1, { spread: 0.45, lipDominance: 0.35, jawDominance: 0.9 }),
  z: v(0.1, { spread: 0.45, lipDominance: 0.35, jawDominance: 0.9 }),
  ʃ: v(0.14, { round: 0.65, lipDominance: 0.7, jawDominance: 0.9 }),
  ʒ: v(0.14, { round: 0.65, lipDominance: 0.7, jawDominance: 0.9 }),
  ɕ: v(0.12, { spread: 0.3, lipDominance: 0.4, jawDominance: 0.9 }),
  ʑ: v(0.12, { spread: 0.3, lipDominance: 0.4, jawDominance: 0.9 }),
  // Tongue consonants: the jaw nearly closes, the lips follow the neighbouring vowels.
  θ: v(0.18, { jawDominance: 0.7 }), ð: v(0.18, { jawDominance: 0.7 }),
  t: v(0.16, { jawDominance: 0.8 }), d: v(0.16, { jawDominance: 0.8 }), n: v(0.16, { jawDominance: 0.7 }),
  l: v(0.25, { jawDominance: 0.5 }), ɾ: v(0.2), ɹ: v(0.25, { round: 0.35, lipDominance: 0.4 }), r: v(0.22), ʁ: v(0.3), ʀ: v(0.3),
  k: v(0.24, { jawDominance: 0.6 }), g: v(0.24, { jawDominance: 0.6 }), ɡ: v(0.24, { jawDominance: 0.6 }), ŋ: v(0.24, { jawDominance: 0.6 }),
  x: v(0.28), ç: v(0.2, { spread: 0.3 }), j: v(0.2, { spread: 0.5, lipDominance: 0.4 }), ʎ: v(0.22), ɲ: v(0.18),
  ʔ: v(0.2, { jawDominance: 0.2 }),
  // /h/ takes the shape of the vowel it precedes.
  h: v(0.45, { lipDominance: 0.02, jawDominance: 0.05 }), ɦ: v(0.45, { lipDominance: 0.02, jawDominance: 0.05 }),
};

/** ARPAbet -> IPA (CMU set, stress digits removed). */
const ARPABET: Readonly<Record<string, string>> = {
  aa: 'ɑ', ae: 'æ', ah: 'ʌ', ao: 'ɔ', aw: 'aʊ', ax: 'ə', ay: 'aɪ', b: 'b', ch: 'tʃ', d: 'd', dh: 'ð', eh: 'ɛ', er: 'ɝ',
  ey: 'eɪ', f: 'f', g: 'ɡ', hh: 'h', ih: 'ɪ', iy: 'i', jh: 'dʒ', k: 'k', l: 'l', m: 'm', n: 'n', ng: 'ŋ', ow: 'oʊ',
  oy: 'ɔɪ', p: 'p', r: 'ɹ', s: 's', sh: 'ʃ', t: 't', th: 'θ', uh: 'ʊ', uw: 'u', v: 'v', w: 'w', y: 'j', z: 'z',
  zh: 'ʒ', em: 'm', en: 'n', el: 'l', dx: 'ɾ', nx: 'n', wh: 'ʍ',
};

/** Marks that do not change the mouth: length, stress, syllabicity, tones, ties, aspiration. */
const IGNORED = /[ːˑˈˌ̩̯͡‿ʰʲˠˤ̥̃̊0-9'ˀ˞]/gu;
const SILENCE = new Set(['_', '', 'sil', 'sp', 'pau', '#', ' ']);

const cache = new Map<string, Viseme[]>();

/** The sounds of one phoneme string, in order (an IPA cluster may hold several). */
export function visemesOf(phoneme: string): readonly Viseme[] {
  const cached = cache.get(phoneme);
  if (cached) return cached;
  let result: Viseme[];
  const bare = phoneme.trim();
  // ARPAbet is upper case (`M`, `UW1`) or two lower-case letters (`uw`); a single lower-case
  // letter is IPA (`y` is a rounded vowel there, /j/ in ARPAbet).
  const arpa = /^([A-Z]{1,2}|[a-z]{2})[012]?$/.test(bare) ? ARPABET[bare.replace(/[012]$/, '').toLowerCase()] : undefined;
  const ipa = (arpa ?? bare).normalize('NFD').replace(IGNORED, '');
  if (SILENCE.has(bare.toLowerCase()) || SILENCE.has(ipa)) result = [SILENT_VISEME];
  else {
    result = [];
    for (const ch of ipa) {
      const vis = IPA[ch] ?? IPA[ch.toLowerCase()];
      // Labialisation (ʷ) rounds the sound before it.
      if (ch === 'ʷ' && result.length) result[result.length - 1] = { ...result.at(-1)!, round: 1, lipDominance: 0.9 };
      else if (vis) result.push(vis);
    }
    if (result.length === 0) result = [NEUTRAL_VISEME];
  }
  if (cache.size < 4096) cache.set(phoneme, result);
  return result;
}

/** The mouth shape of a phoneme (its first sound; see `visemesOf` for clusters). */
export function visemeFor(phoneme: string): Viseme {
  return visemesOf(phoneme)[0]!;
}

const isVowel = (x: Viseme) => x.jawDominance === 1 && !x.closed;

/**
 * Phoneme timings -> viseme segments: a cluster's duration is shared among its sounds (vowels
 * take twice a consonant's share; a diphthong moves from its first vowel to its second).
 */
export function visemeSegments(phonemes: readonly { phoneme: string; startMs: number; endMs: number }[]): VisemeSegment[] {
  const out: VisemeSegment[] = [];
  for (const p of phonemes) {
    if (!(p.endMs > p.startMs)) continue;
    const sounds = visemesOf(p.phoneme);
    if (sounds.length === 1) {
      out.push({ startMs: p.startMs, endMs: p.endMs, viseme: sounds[0]! });
      continue;
    }
    const weights = sounds.map((s) => (isVowel(s) ? 2 : 1));
    const total = weights.reduce((a, b) => a + b, 0);
    let at = p.startMs;
    sounds.forEach((s, i) => {
      const end = i === sounds.length - 1 ? p.endMs : at + ((p.endMs - p.startMs) * weights[i]!) / total;
      out.push({ startMs: at, endMs: end, viseme: s });
      at = end;
    });
  }
  return out;
}
