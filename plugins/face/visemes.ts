/**
 * Phoneme -> mouth shape, for TTS engines that report phoneme timings. Only what audio alone
 * gets wrong is overridden: lips close on bilabials, round on rounded vowels, spread on front
 * vowels. Accepts ARPAbet (`M`, `UW1`) and common IPA symbols.
 */
export interface VisemeHint {
  /** Lips pressed together (m, b, p). */
  readonly closed: boolean;
  /** -1 rounded .. +1 spread. */
  readonly width: number;
}

const BILABIAL = new Set(['m', 'b', 'p', 'em']);
const ROUNDED = new Set(['uw', 'ow', 'ao', 'oy', 'w', 'u', 'uː', 'o', 'oʊ', 'ɔ', 'ɔː', 'ʊ']);
const SPREAD = new Set(['iy', 'ih', 'ey', 'eh', 'i', 'iː', 'ɪ', 'e', 'eɪ', 'ɛ', 's', 'z']);

export function visemeFor(phoneme: string): VisemeHint {
  const p = phoneme.toLowerCase().replace(/[0-9ˈˌ]/g, '');
  if (BILABIAL.has(p)) return { closed: true, width: 0 };
  if (ROUNDED.has(p)) return { closed: false, width: -1 };
  if (SPREAD.has(p)) return { closed: false, width: 0.8 };
  return { closed: false, width: 0 };
}
