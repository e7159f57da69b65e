/**
 * Which of the agent's speech segments the avatar is playing, told from the face session's own
 * frames: what LiveKit's avatar protocol reports back to the agent (`lk.playback_started` when a
 * segment's first sound plays, `lk.playback_finished` with the played position when its last
 * sound played or it was cleared) so the agent's transcript and interruption logic follow what
 * the visitor actually heard, not what was sent.
 *
 * One segment = one `lk.audio_stream` byte stream = one turn of the face session. Turns are
 * numbered 1, 2, ... in the order they were started (the `FaceFrame.turnId` contract), so the
 * n-th segment opened here is turn n provided its owner starts exactly one turn per segment
 * (`LiveKitAvatarWorker` does, and never lets `pushAudio` start one implicitly).
 *
 * After `clear()` (an `lk.clear_buffer`), frames of the cleared turns that still carry speech
 * (decided before the cancel reached the face: its render lead, under a frame) go out silent.
 */
import { FACE_TIMING, type FaceFrame } from '../../processors/avatar/face-model.ts';

export type AvatarPlaybackEvent =
  | { readonly type: 'started'; readonly segment: number }
  | { readonly type: 'finished'; readonly segment: number; readonly positionS: number; readonly interrupted: boolean };

interface Segment {
  readonly id: number;
  /** 16 kHz samples queued for it. */
  samples: number;
  /** Its stream ended (no more audio will come). */
  closed: boolean;
  started: boolean;
  /** Samples of speech frames emitted for it. */
  played: number;
  /** Failed or refused before any sound: finishes interrupted at 0. */
  failed: boolean;
  /** Cut short after some of its audio was queued (too long, a stream fault): what was queued plays, and it finishes interrupted. */
  truncated: boolean;
}

const SPF = FACE_TIMING.samplesPerFrame;
const RATE = FACE_TIMING.audioSampleRate;

export class AvatarPlayback {
  private readonly open = new Map<number, Segment>();
  private readonly cleared = new Set<number>();
  private nextId = 1;

  /** Segments not finished yet (playing, queued or still receiving). */
  get outstanding(): number {
    return this.open.size;
  }

  /** Whether any segment has been heard and not finished. */
  get playing(): boolean {
    for (const s of this.open.values()) if (s.started) return true;
    return false;
  }

  /** A new segment; its id is the face session turn its owner starts now. */
  openSegment(): number {
    const id = this.nextId++;
    this.open.set(id, { id, samples: 0, closed: false, started: false, played: 0, failed: false, truncated: false });
    return id;
  }

  addSamples(segment: number, samples: number): void {
    const s = this.open.get(segment);
    if (s) s.samples += samples;
  }

  isCleared(segment: number): boolean {
    return this.cleared.has(segment);
  }

  /** 16 kHz samples queued for the open segments and not played yet (what the face holds in memory for them). */
  get unplayedSamples(): number {
    let n = 0;
    for (const s of this.open.values()) n += Math.max(0, s.samples - s.played);
    return n;
  }

  /**
   * The segment's stream ended. A segment that never got audio (or failed: a bad header, a
   * refused stream) finishes now, since no frame of it will ever play. A `truncated` one (cut
   * short after some audio was queued) plays what was queued and then finishes interrupted.
   */
  closeSegment(segment: number, how: { readonly failed?: boolean; readonly truncated?: boolean } = {}): AvatarPlaybackEvent[] {
    const s = this.open.get(segment);
    if (!s) return [];
    s.closed = true;
    s.failed ||= how.failed === true;
    s.truncated ||= how.truncated === true;
    if ((s.samples === 0 || s.failed) && !s.started) {
      this.open.delete(segment);
      return [{ type: 'finished', segment, positionS: 0, interrupted: s.failed || s.truncated }];
    }
    return [];
  }

  /**
   * A frame the face session emitted: returns it (silenced if it belongs to a cleared turn) and
   * the playback events it marks.
   */
  observe(frame: FaceFrame): { readonly frame: FaceFrame; readonly events: AvatarPlaybackEvent[] } {
    const turn = frame.turnId;
    const speech = frame.type === 'speech' || frame.type === 'speech-start';
    if (turn === null) return { frame, events: [] };
    if (this.cleared.has(turn)) return { frame: speech ? { ...frame, audio: new Int16Array(SPF) } : frame, events: [] };
    const s = this.open.get(turn);
    if (!s) return { frame, events: [] };
    const events: AvatarPlaybackEvent[] = [];
    if (speech) {
      if (!s.started && frame.type === 'speech-start') {
        s.started = true;
        events.push({ type: 'started', segment: s.id });
      }
      // What the visitor hears of the segment: the frame's own speech samples where the face
      // tells them (an underrun's silent frames add nothing), else a whole frame.
      if (s.started) s.played += frame.speechSamples ?? SPF;
    } else if (s.started && s.closed) {
      // The first frame of the turn without speech (its fade-out): every sound of it has played.
      this.open.delete(turn);
      events.push({ type: 'finished', segment: s.id, positionS: Math.min(s.samples, s.played) / RATE, interrupted: s.truncated });
    }
    return { frame, events };
  }

  /**
   * An interruption: every outstanding segment finishes, interrupted, at the position heard. The
   * one playing is credited with the speech emitted minus `unplayedMs` (the audio dropped from
   * the output queue, never heard); queued ones with 0.
   */
  clear(unplayedMs: number): AvatarPlaybackEvent[] {
    const events: AvatarPlaybackEvent[] = [];
    for (const s of this.open.values()) {
      this.cleared.add(s.id);
      const heard = s.started ? Math.max(0, Math.min(s.samples, s.played) / RATE - unplayedMs / 1000) : 0;
      events.push({ type: 'finished', segment: s.id, positionS: heard, interrupted: true });
    }
    this.open.clear();
    return events;
  }
}
