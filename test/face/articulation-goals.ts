/**
 * Issue #29's articulation goals, computed over rendered utterances of the eSpeak corpus
 * (phoneme-corpus.ts). Shared by the test (which asserts them) and the media script.
 *
 * - closure: share of bilabials with a frame within +-1 frame where the inner-lip gap is at most
 *   5% of the utterance's largest gap and no teeth show (teeth pixels below 0.5% of the mouth's
 *   area, mouth width x half its width);
 * - rounding: share of rounded vowels whose narrowest frame (+-1) is at most 85% of the rest
 *   width; /i/: share whose widest frame (+-1) is at least 105%. Vowels of 50 ms or more: eSpeak
 *   makes some far shorter (the /i/ of a quick "we" lasts 17-49 ms, and the lips stay rounded
 *   from the /w/ through it, as a speaker's do); `roundingAll` and `spreadAll` count every one;
 * - false closures: share of open vowels (120 ms or longer) with a closed frame whose centre lies
 *   inside the vowel's core (one frame in from each end, the same +-1 frame the closures are
 *   allowed: lips lead the sound) while the vowel sounds (the frame's audio
 *   within 20 dB of the utterance's loudest frame): eSpeak counts the silent closure of a stop
 *   after a vowel as the vowel's end ("map": the lips close for the p inside the æ's interval),
 *   and closing there is right;
 * - smile: the median corner height of frames in speech (250 ms or more into a stretch of
 *   sounds without a pause of 200 ms), relative to the reference's; and the corner height 500 ms
 *   after the last sound, relative to the reference's;
 * - flicker: zigzags per second of speech in the width and opening tracks (steps of at least 1%
 *   of the mouth width).
 */
import { flickerRate } from '../../plugins/face/face-metrics.ts';
import { SILENCE_PHONEME } from '../../plugins/local/espeak-timeline.ts';
import {
  framesAround, isBilabial, isCloseFront, isOpenVowel, isRoundedVowel, isW, type FrameRecord, type RenderedUtterance, type Utterance,
} from './phoneme-corpus.ts';

export interface GoalCounts {
  bilabials: number;
  closed: number;
  rounded: number;
  roundedNarrow: number;
  w: number;
  wNarrow: number;
  closeFront: number;
  closeFrontWide: number;
  /** The same over every vowel, however short. */
  roundedAll: number;
  roundedNarrowAll: number;
  closeFrontAll: number;
  closeFrontWideAll: number;
  openVowels: number;
  falseClosures: number;
  /** Per utterance: median corner height in speech / the reference's. */
  smileInSpeech: number[];
  /** Per utterance: corner height 500 ms after the last sound / the reference's. */
  smileAfter: number[];
  speechSeconds: number;
  widthZigzags: number;
  gapZigzags: number;
}

export const emptyCounts = (): GoalCounts => ({
  bilabials: 0, closed: 0, rounded: 0, roundedNarrow: 0, w: 0, wNarrow: 0, closeFront: 0, closeFrontWide: 0, roundedAll: 0, roundedNarrowAll: 0, closeFrontAll: 0, closeFrontWideAll: 0, openVowels: 0, falseClosures: 0,
  smileInSpeech: [], smileAfter: [], speechSeconds: 0, widthZigzags: 0, gapZigzags: 0,
});

const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[s.length >> 1]! : Number.NaN; };

export function isClosed(f: FrameRecord, maxGap: number, mouthWidthPx: number): boolean {
  return f.gap <= 0.05 * maxGap && f.teethPixels < 0.005 * mouthWidthPx * (mouthWidthPx / 2);
}

/** Adds one rendered utterance's figures to `c`. */
export function countGoals(c: GoalCounts, u: Utterance, r: RenderedUtterance): void {
  const frames = r.frames;
  const speechFrames = frames.filter((f) => f.type === 'speech' || f.type === 'speech-start');
  const maxGap = Math.max(...speechFrames.map((f) => f.gap));
  const closed = (f: FrameRecord) => isClosed(f, maxGap, r.mouthWidthPx);
  const loudest = Math.max(...speechFrames.map((f) => f.levelDb));
  for (const p of u.phonemes) {
    const around = framesAround(frames, p);
    if (isBilabial(p.phoneme)) {
      c.bilabials++;
      if (around.some(closed)) c.closed++;
    } else if (isRoundedVowel(p.phoneme)) {
      const narrow = Math.min(...around.map((f) => f.width)) <= 0.85;
      c.roundedAll++;
      if (narrow) c.roundedNarrowAll++;
      if (p.endMs - p.startMs >= 50) { c.rounded++; if (narrow) c.roundedNarrow++; }
    } else if (isCloseFront(p.phoneme)) {
      const wide = Math.max(...around.map((f) => f.width)) >= 1.05;
      c.closeFrontAll++;
      if (wide) c.closeFrontWideAll++;
      if (p.endMs - p.startMs >= 50) { c.closeFront++; if (wide) c.closeFrontWide++; }
    }
    if (isW(p.phoneme)) {
      c.w++;
      if (Math.min(...around.map((f) => f.width)) <= 0.85) c.wNarrow++;
    }
    if (isOpenVowel(p.phoneme) && p.endMs - p.startMs >= 120) {
      c.openVowels++;
      const inside = frames.filter((f) => f.index * 40 + 20 >= p.startMs + 40 && f.index * 40 + 20 < p.endMs - 40 && f.levelDb >= loudest - 20);
      if (inside.some(closed)) c.falseClosures++;
    }
  }
  // Smile: frames 250 ms or more into a stretch of sounds (a pause of 200 ms ends a stretch).
  const sounds = u.phonemes.filter((p) => p.phoneme !== SILENCE_PHONEME);
  const stretchStart: number[] = [];
  let start = sounds[0]?.startMs ?? 0, lastEnd = start;
  for (const p of sounds) {
    if (p.startMs - lastEnd >= 200) start = p.startMs;
    stretchStart.push(start);
    lastEnd = p.endMs;
  }
  const inSpeech = frames.filter((f) => {
    const t = f.index * 40 + 20;
    const i = sounds.findIndex((p) => p.startMs <= t && t < p.endMs);
    return i >= 0 && t - stretchStart[i]! >= 250;
  });
  c.smileInSpeech.push(median(inSpeech.map((f) => f.cornerHeight)) / r.restCornerHeight);
  const end = sounds.at(-1)?.endMs ?? 0;
  const after = frames.find((f) => f.index * 40 >= end + 500);
  if (after) c.smileAfter.push(after.cornerHeight / r.restCornerHeight);
  c.speechSeconds += speechFrames.length / 25;
  c.widthZigzags += flickerRate(speechFrames.map((f) => f.width), 0.01) * (speechFrames.length - 1) / 25;
  c.gapZigzags += flickerRate(speechFrames.map((f) => f.gap), 0.01) * (speechFrames.length - 1) / 25;
}

export interface GoalSummary {
  closure: number;
  rounding: number;
  roundingAll: number;
  w: number;
  spread: number;
  spreadAll: number;
  falseClosure: number;
  smileInSpeechMedian: number;
  smileInSpeechMax: number;
  smileAfterMin: number;
  widthFlickerPerS: number;
  gapFlickerPerS: number;
}

export function summarise(c: GoalCounts): GoalSummary {
  return {
    closure: c.closed / Math.max(1, c.bilabials),
    rounding: c.roundedNarrow / Math.max(1, c.rounded),
    roundingAll: c.roundedNarrowAll / Math.max(1, c.roundedAll),
    w: c.wNarrow / Math.max(1, c.w),
    spread: c.closeFrontWide / Math.max(1, c.closeFront),
    spreadAll: c.closeFrontWideAll / Math.max(1, c.closeFrontAll),
    falseClosure: c.falseClosures / Math.max(1, c.openVowels),
    smileInSpeechMedian: median(c.smileInSpeech),
    smileInSpeechMax: Math.max(...c.smileInSpeech),
    smileAfterMin: Math.min(...c.smileAfter),
    widthFlickerPerS: c.widthZigzags / Math.max(1e-9, c.speechSeconds),
    gapFlickerPerS: c.gapZigzags / Math.max(1e-9, c.speechSeconds),
  };
}
