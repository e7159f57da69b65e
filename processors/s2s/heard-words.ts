/**
 * Where a speech-to-speech turn's words fall in its audio. Providers give no word timings, so
 * the position is estimated, by two rules that are each other's inverse:
 *
 * - `wordsHeard`: how many words the user has heard after `playedMs` of the turn's audio. Once
 *   the provider has sent the whole turn (`fedMs` known), word k of n counts as heard after
 *   (k+1)/n of the audio, all of them within the last `END_SLACK_MS`; while it still streams, at
 *   `charsPerSecond` of played audio.
 * - `wordPlaces`: the same places as times from the end of the turn's audio (so negative), for
 *   words handed in-band to the face or output with the turn's end.
 */
const END_SLACK_MS = 40;

export function wordsHeard(words: readonly string[], playedMs: number, fedMs: number, ended: boolean, charsPerSecond: number): number {
  if (ended) return playedMs + END_SLACK_MS >= fedMs ? words.length : Math.floor((words.length * playedMs) / Math.max(1, fedMs));
  const chars = (playedMs / 1000) * charsPerSecond;
  let heard = 0;
  for (let n = 0, end = 0; n < words.length; n++) {
    end += words[n]!.length + (n ? 1 : 0);
    if (end > chars) break;
    heard = n + 1;
  }
  return heard;
}

/** Words `from` on, each timed where `wordsHeard` (ended) first counts it, relative to the audio's end. */
export function wordPlaces(words: readonly string[], from: number, fedMs: number): Array<{ word: string; startMs: number; endMs: number }> {
  const n = words.length;
  return words.slice(from).map((word, i) => {
    const at = Math.max(0, Math.min(((from + i + 1) * fedMs) / n, fedMs - END_SLACK_MS)) - fedMs;
    return { word, startMs: at, endMs: at };
  });
}
