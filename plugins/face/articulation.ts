/**
 * Coarticulation: viseme segments (from phoneme timings, or estimated from the audio by
 * audio-visemes.ts) -> one articulation target per 40 ms frame.
 *
 * Real lips do not jump from shape to shape: each sound pulls the mouth toward its posture with
 * a strength that fades with distance in time (a dominance model, after Cohen and Massaro), and
 * the pull reaches further ahead than behind, because lips anticipate the next sound (the
 * rounding of "oo" in "stew" starts on the s). Here every channel (opening, rounding, spread,
 * labiodental tuck) is the dominance-weighted mean of the segments around the frame, sampled
 * at three instants across the frame (so a short sound is not skipped between frame centres),
 * shifted `leadMs` ahead (lips lead the sound). The result is a smooth function of time: a frame
 * never flickers back to a shape its neighbours left.
 *
 * Bilabial closure is the exception: it must be reached, however short the /b/. A frame is closed
 * as much as a bilabial fills its window (half the bilabial's length, or half a frame, is enough
 * for a full closure), so every bilabial closes at least one frame, fast speech included.
 */
import { SILENT_VISEME, type Viseme, type VisemeSegment } from './visemes.ts';

export const COARTICULATION = {
  /** Lips lead the sound by this much (ms). */
  leadMs: 20,
  /** Reach of a sound's pull on the frames before it (anticipation) and after it (carry-over), ms. */
  anticipationMs: 75,
  carryOverMs: 35,
  /** Instants sampled across a frame, ms from its centre. */
  samplesMs: [-13, 0, 13],
  frameMs: 40,
} as const;

export interface Articulation {
  /** Opening asked for by the sounds, 0..1 (1: the widest vowel). */
  open: number;
  /** Lips pressed together, 0..1. */
  closure: number;
  round: number;
  spread: number;
  tuck: number;
  /** How long the mouth has been in a pause at this frame (ms; 0 while sounds are made). */
  pauseMs: number;
}

export const REST_ARTICULATION: Readonly<Articulation> = { open: 0, closure: 0, round: 0, spread: 0, tuck: 0, pauseMs: 0 };

/**
 * Articulation of the frame whose audio spans [frameStartMs, frameStartMs + 40) of the turn,
 * from `segments` sorted by start (contiguous or not; time not covered counts as a pause).
 * `from` is a search hint (index of a segment at or before the frame), returned updated.
 */
export function articulationAt(segments: readonly VisemeSegment[], frameStartMs: number, hint = { from: 0 }): Articulation {
  const C = COARTICULATION;
  const centre = frameStartMs + C.frameMs / 2 + C.leadMs;
  const lo = centre - 3 * C.carryOverMs - 20, hi = centre + 3 * C.anticipationMs + 20;
  let i = Math.min(hint.from, Math.max(0, segments.length - 1));
  while (i > 0 && segments[i]!.endMs > lo) i--;
  while (i < segments.length && segments[i]!.endMs <= lo) i++;
  hint.from = i;

  let jawW = 0, open = 0, shapeW = 0, round = 0, spread = 0, lipW = 0, tuck = 0;
  const add = (vis: Viseme, d: number) => {
    const tau = d < 0 ? C.anticipationMs : C.carryOverMs; // d < 0: the segment is still ahead
    const k = Math.exp(-((d / tau) ** 2));
    // A labiodental holds its lower lip, not the mouth's width: round and spread come from its
    // neighbours ("if" stays spread through the f).
    const wj = vis.jawDominance * k, wl = vis.lipDominance * k, ww = vis.tuck > 0 ? 0.25 * wl : wl;
    jawW += wj; open += wj * vis.open;
    shapeW += ww; round += ww * vis.round; spread += ww * vis.spread;
    lipW += wl; tuck += wl * vis.tuck;
  };
  let closure = 0;
  const winStart = frameStartMs + C.leadMs, winEnd = winStart + C.frameMs;
  let cursor = lo;
  for (let j = i; j < segments.length && segments[j]!.startMs < hi; j++) {
    const s = segments[j]!;
    // Uncovered time before this segment is a pause.
    if (s.startMs > cursor + 1) addSpan(add, SILENT_VISEME, cursor, s.startMs, centre);
    addSpan(add, s.viseme, s.startMs, s.endMs, centre);
    cursor = Math.max(cursor, s.endMs);
    if (s.viseme.closed) {
      const overlap = Math.min(s.endMs, winEnd) - Math.max(s.startMs, winStart);
      if (overlap > 0) closure = Math.max(closure, Math.min(1, overlap / (0.5 * Math.min(s.endMs - s.startMs, C.frameMs))));
    }
  }
  if (cursor < hi) addSpan(add, SILENT_VISEME, cursor, hi, centre);

  return {
    open: jawW > 0 ? open / jawW : 0,
    closure,
    round: shapeW > 0 ? round / shapeW : 0,
    spread: shapeW > 0 ? spread / shapeW : 0,
    tuck: lipW > 0 ? tuck / lipW : 0,
    pauseMs: pauseAt(segments, i, centre),
  };
}

/**
 * How far before a frame's start `articulationAt` reads segments (ms): the carry-over reach of
 * the earliest instant it samples. Only `pauseMs` looks further back, to the last sound.
 */
export const ARTICULATION_REACH_BEHIND_MS =
  3 * COARTICULATION.carryOverMs + 20 - COARTICULATION.frameMs / 2 - COARTICULATION.leadMs;

/**
 * Drops the leading segments that end by `cutMs` (a turn's history, long played), keeping the
 * last sound among them (a pause's `pauseMs` is measured back to it) and the last segment.
 * `articulationAt` of any frame starting more than `ARTICULATION_REACH_BEHIND_MS` after `cutMs`
 * reads the same from what is left, given its search hint moved back by the count returned
 * (the entries that left the front; clamp at 0).
 */
export function dropSegmentsBefore(segments: VisemeSegment[], cutMs: number): number {
  let cut = 0;
  while (cut < segments.length - 1 && segments[cut]!.endMs <= cutMs) cut++;
  let sound = cut - 1;
  while (sound >= 0 && segments[sound]!.viseme.silent) sound--;
  const removed = sound >= 0 ? cut - 1 : cut;
  if (removed <= 0) return 0;
  if (sound >= 0) segments.splice(0, cut, segments[sound]!);
  else segments.splice(0, cut);
  return removed;
}

/** Adds a segment's pull at each sampled instant of the frame (signed distance, ms). */
function addSpan(add: (v: Viseme, d: number) => void, vis: Viseme, start: number, end: number, centre: number): void {
  for (const dt of COARTICULATION.samplesMs) {
    const t = centre + dt;
    add(vis, t < start ? t - start : t > end ? t - end : 0);
  }
}

/** How long the silence around `t` has lasted (0 when `t` is in a sound). */
function pauseAt(segments: readonly VisemeSegment[], from: number, t: number): number {
  let j = from;
  while (j < segments.length && segments[j]!.endMs <= t) j++;
  const s = segments[j];
  if (s && s.startMs <= t && !s.viseme.silent) return 0;
  // In a silent segment or a gap: back to the end of the last sound before t.
  let k = Math.min(j, segments.length) - 1;
  while (k >= 0 && segments[k]!.viseme.silent) k--;
  const lastSoundEnd = k >= 0 ? segments[k]!.endMs : 0;
  return Math.max(0, t - lastSoundEnd);
}
