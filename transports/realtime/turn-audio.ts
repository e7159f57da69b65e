/**
 * Which slice of the original TTS audio plays with each avatar frame (SvcSTVClient's A/V sync).
 *
 * The client keeps, per utterance, both the 16 kHz copy it sent and the original-rate audio. A
 * speech frame from the server carries the 640 samples (16 kHz) its image was animated with: a
 * full 40 ms window, a partial one padded with zeros (end of the audio), or only zeros (the
 * server's copy ran dry mid-utterance: streaming TTS slower than real time). Matching those
 * samples against what was sent tells exactly how much input the frame consumed, so the
 * original-rate audio stays aligned with the picture across underruns and utterance boundaries
 * (never "40 ms per frame, whatever happened").
 */
import { concat } from '../../core/audio.ts';
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';

const SAMPLES_PER_FRAME = FACE_TIMING.samplesPerFrame;
/** How far (16 kHz samples) to look around the expected position when a frame does not match it. */
const RESYNC_WINDOW = 2 * SAMPLES_PER_FRAME;

class SampleLog {
  private parts: Int16Array[] = [];
  private flat: Int16Array | undefined;
  length = 0;

  push(pcm: Int16Array): void {
    if (!pcm.length) return;
    this.parts.push(pcm);
    this.length += pcm.length;
    this.flat = undefined;
  }

  get all(): Int16Array {
    if (!this.flat) {
      this.flat = this.parts.length === 1 ? this.parts[0]! : concat(this.parts);
      this.parts = [this.flat];
    }
    return this.flat;
  }
}

export class LocalTurn {
  readonly sent = new SampleLog();
  readonly original = new SampleLog();
  /** The server's id for this utterance, learnt from its first speech frame. */
  serverTurnId: number | undefined;
  ended = false;
  /** Position (16 kHz samples) of the next frame's audio in `sent`. */
  private cursor = 0;

  get hasAudio(): boolean {
    return this.sent.length > 0;
  }

  /** The original-rate audio that belongs with a speech frame carrying `received` (16 kHz). */
  audioFor(received: Int16Array, outputRate: number, samplesOut: number): Int16Array {
    const sent = this.sent.all;
    let at = this.cursor;
    let consumed = consumedAt(sent, at, received);
    if (consumed === undefined) {
      // Lost track (should not happen): find the frame's audio near where it was expected.
      const found = locate(sent, at, received);
      if (found) [at, consumed] = found;
      else consumed = Math.min(SAMPLES_PER_FRAME, Math.max(0, sent.length - at));
    }
    this.cursor = at + consumed;
    const ratio = outputRate / FACE_TIMING.audioSampleRate;
    const from = Math.round(at * ratio);
    const to = consumed === 0 ? from : Math.round((at + consumed) * ratio);
    const out = new Int16Array(samplesOut);
    out.set(this.original.all.subarray(from, Math.min(to, from + samplesOut)));
    return out;
  }
}

/** Input samples a frame consumed if it was animated from `sent` at `at`; undefined if it was not. */
function consumedAt(sent: Int16Array, at: number, received: Int16Array): number | undefined {
  let k = 0;
  while (k < received.length && at + k < sent.length && received[k] === sent[at + k]) k++;
  for (let i = k; i < received.length; i++) if (received[i] !== 0) return undefined;
  return k;
}

function locate(sent: Int16Array, around: number, received: Int16Array): [number, number] | undefined {
  let best: [number, number] | undefined;
  const from = Math.max(0, around - RESYNC_WINDOW);
  const to = Math.min(sent.length - 1, around + RESYNC_WINDOW);
  for (let at = from; at <= to; at++) {
    const k = consumedAt(sent, at, received);
    if (k !== undefined && k > 0 && (!best || k > best[1])) best = [at, k];
  }
  return best;
}
