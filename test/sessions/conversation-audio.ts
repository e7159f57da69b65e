/**
 * What the end-to-end session tests (embedded and LiveKit rooms) use to talk and listen like a
 * visitor: speech from the offline voice, the offline phrase recogniser run on received audio,
 * and the motion inside a region of decoded pictures (the mouth).
 */
import { concat, silence } from '../../core/audio.ts';
import { LocalPhraseSTT, type LocalTTSService } from '../../plugins/local/index.ts';
import type { TranscriptEvent } from '../../processors/services.ts';
import { holdsWithin } from '../../testing/until.ts';

/** A 10 ms level above this RMS (of full scale) is loud: what the visitors' `audibleMs` counts by default. */
const LOUD_RMS = 0.01;

/** What a test visitor (RoomVisitor, LiveKitVisitor) records of the audio it receives: 10 ms levels. */
export interface HeardLevels {
  readonly audioLevels: ReadonlyArray<{ readonly at: number; readonly rms: number }>;
}

/**
 * Waits until nothing loud has reached the visitor for `quietMs` (at most `timeoutMs`): a bot's
 * turn ends when its audio left the bot, and its tail is still on its way (the network, the
 * receiver's jitter buffer; longer on a loaded machine). A greeting cut there was read as its
 * beginning ('Welcome to the space station…') or as nothing (local CI run K).
 */
export async function tailHeard(visitor: HeardLevels, options: { quietMs?: number; timeoutMs?: number } = {}): Promise<void> {
  const quietMs = options.quietMs ?? 400;
  const lastLoud = () => visitor.audioLevels.findLast((l) => l.rms > LOUD_RMS)?.at ?? 0;
  await holdsWithin(() => Date.now() - lastLoud() > quietMs, { timeoutMs: options.timeoutMs ?? 5_000, intervalMs: 20 });
}

/** The longest quiet stretch (ms) between loud 10 ms levels since `since`: a dropout splits an utterance in two. */
export function longestQuietStretchMs(visitor: HeardLevels, since: number): number {
  const levels = visitor.audioLevels.filter((l) => l.at >= since);
  const loud = levels.flatMap((l, i) => (l.rms > LOUD_RMS ? [i] : []));
  let gap = 0;
  for (let i = 1; i < loud.length; i++) gap = Math.max(gap, loud[i]! - loud[i - 1]! - 1);
  return gap * 10;
}

/** `text` spoken by the offline voice at 16 kHz, with 300 ms of silence after it. */
export async function speech(voice: LocalTTSService, text: string): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of voice.synthesize({ text, language: 'en', sampleRate: 16_000 })) if (e.type === 'audio') parts.push(e.pcm);
  return concat([...parts, silence(300, 16_000)]);
}

/** What the offline phrase recogniser hears in received audio, among `phrases`. */
export async function recognise(pcm: Int16Array, sampleRate: number, phrases: string[]): Promise<string[]> {
  const stt = new LocalPhraseSTT({ phrases, unrecognised: 'ignore' });
  const stream = await stt.connect({ language: 'en', sampleRate, channels: 1, interimResults: false });
  const heard: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => heard.push(e));
  stream.sendAudio(concat([silence(300, sampleRate), pcm, silence(300, sampleRate)]));
  stream.finalize();
  await stream.close();
  return heard.filter((e) => e.final).map((e) => e.text);
}

/** Mean absolute luma change from the previous picture inside a box (fractions of the frame). */
export function regionMotion(prev: Uint8Array, cur: Uint8Array, width: number, height: number, box: [number, number, number, number]): number {
  const [x0, y0, x1, y1] = [Math.floor(box[0] * width), Math.floor(box[1] * height), Math.floor(box[2] * width), Math.floor(box[3] * height)];
  let sum = 0;
  let n = 0;
  for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++, n++) sum += Math.abs(cur[y * width + x]! - prev[y * width + x]!);
  return sum / n;
}
