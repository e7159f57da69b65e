/**
 * The clock-free session core: turns of queued speech in, one frame per `nextFrame()` out.
 * Frame n carries audio samples [n*640, n*640+640) of what is playing, so audio and video stay
 * paired by construction.
 *
 * `nextFrame()` decides the frame synchronously when called (turn state, audio window, the
 * animator's pose: cheap, on the caller's thread) and resolves once its picture is rasterised
 * by the `FaceRaster` (inline, or on a render worker thread; see render-pool.ts).
 */
import type { FaceFrame, FaceFrameSource, FaceFrameType, FaceImageFormat, FaceTurnOptions } from '../../processors/avatar/face-model.ts';
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';
import { ARTICULATION_REACH_BEHIND_MS, articulationAt } from './articulation.ts';
import { AudioVisemeTracker } from './audio-visemes.ts';
import { analyseWindow, FaceAnimator } from './face-animator.ts';
import type { FacePose } from './face-pose.ts';
import { pitchOf, type VisitorWindow } from './listening.ts';
import type { FaceGeometry, FaceRaster } from './face-raster.ts';
import type { ArticulationInput } from './mouth-animator.ts';
import { visemesOf, visemeSegments, type VisemeSegment } from './visemes.ts';
import type { PhonemeTiming } from '../../core/frames.ts';

const SOURCE_DEFAULTS = {
  /** Speech queued before a turn starts playing (absorbs TTS chunk jitter). */
  prebufferMs: 80,
  /**
   * A turn started in a frame that goes out as it takes the turn (`startSpeechIn`: an idle frame
   * already rendered, or the session's next frame rendered at once for it) has its next frames
   * decided up to a render lead (under one frame) sooner than the regular start would: it needs
   * this much more queued beyond the prebuffer, unless its audio is all there, so a TTS streaming
   * near real time keeps the same margin against underruns.
   */
  lateStartExtraMs: 40,
  /** Fade-out frames after a turn's last speech frame (160 ms). */
  endFadeFrames: 4,
  /** Fade-out frames after a cancel (120 ms, within the 200 ms promise). */
  cancelFadeFrames: 3,
  /** The visitor is still being listened to this many frames after their last audio (a gap in delivery). */
  listenHoldFrames: 8,
  /**
   * A turn keeps its audio, its audio analysis and its phoneme timings this far behind what it
   * plays (ms), and forgets what is older: an open turn (a `/realtime` client streaming for an
   * hour) holds a bounded window, not its whole history. The frames are the same as with all of
   * it kept: a frame's mouth reads 85 ms back (articulation.ts), and the last sound before a
   * pause is kept to measure the pause from.
   */
  turnHistoryMs: 2000,
} as const;

/**
 * The shortest history a turn may keep (ms): more than a frame's mouth reads back, and longer
 * than the pause (200 ms) after which the mouth rests, so a pause measured back to a forgotten
 * sound reads as one.
 */
const MIN_TURN_HISTORY_MS = Math.max(250, 2 * ARTICULATION_REACH_BEHIND_MS);

interface Turn {
  id: number;
  chunks: Int16Array[];
  queued: number;
  ended: boolean;
  started: boolean;
  /** Samples of this turn's audio already played (the padding of a frame after an underrun not counted). */
  played: number;
  /**
   * Phoneme timings known so far (turn-relative ms), and their viseme segments: those not yet
   * `turnHistoryMs` behind the play position, and the last sounding one before them.
   */
  phonemes: PhonemeTiming[];
  segments: VisemeSegment[];
  /** Search hint into `segments` (frames move forward). */
  hint: { from: number };
  /** Mouth shapes estimated from the turn's audio, where no phoneme timings reach. */
  readonly heard: AudioVisemeTracker;
  heardHint: { from: number };
}

const SPF = FACE_TIMING.samplesPerFrame;
/** How far past a frame's start the audio is analysed for its mouth shape (articulation.ts reads up to ~300 ms ahead). */
const AUDIO_LOOKAHEAD_MS = 400;

export class HumanFaceFrameSource implements FaceFrameSource {
  private readonly turns: Turn[] = [];
  private nextTurnId = 1;
  private index = 0;
  private fading: { turnId: number; left: number } | null = null;
  private readonly animator: FaceAnimator;
  /** Mouth gap (px, mesh) of the last rendered frame: lets tests and benches measure lip sync. */
  lastMouthGapPx = 0;
  /**
   * Ring of reusable RGB buffers (see `recycleImages`); empty: every frame gets a new buffer.
   * A slot is empty while its buffer is out being rendered into (transferred to a worker).
   */
  private imageRing: (Uint8Array | undefined)[] = [];
  private ringNext = 0;
  private closed = false;
  private imageFormat: FaceImageFormat = 'rgb';
  private jpegQuality: number | undefined;
  /** The visitor's audio heard since the last frame, and frames since any arrived. */
  private heard: Int16Array[] = [];
  private framesSinceHeard = Infinity;
  /**
   * @internal How far behind its play position a turn keeps its history (ms, at least 250;
   * `Infinity`: all of it). The frames do not depend on it; tests compare the two.
   */
  turnHistoryMs: number = SOURCE_DEFAULTS.turnHistoryMs;

  constructor(readonly raster: FaceRaster, animator: FaceAnimator) {
    this.animator = animator;
  }

  get width(): number { return this.raster.width; }
  get height(): number { return this.raster.height; }
  /** Where the face sits on the canvas (for crops). */
  get geometry(): FaceGeometry { return this.raster.geometry; }
  get busy(): boolean { return this.turns.length > 0 || this.fading !== null; }

  /**
   * Renders into a ring of `frames` buffers instead of a new 2.7 MB (720p) buffer per frame: a
   * frame's image then stays valid only until `frames` more frames are rendered. For consumers
   * that are done with each image at once (the JPEG session encodes it before rendering the
   * next): at 25 fps the allocations otherwise make V8 run a full garbage collection about every
   * half second, and its pause shows as frame lateness.
   */
  recycleImages(frames: number): void {
    this.imageRing = Array.from({ length: Math.max(0, Math.floor(frames)) }, () => new Uint8Array(this.width * this.height * 3));
    this.ringNext = 0;
  }

  /** Pictures as I420 or JPEG, converted where they are rendered (the render worker, or inline). */
  setImageFormat(format: FaceImageFormat, jpegQuality?: number): void {
    this.imageFormat = format;
    this.jpegQuality = jpegQuality;
    if (format !== 'rgb') this.imageRing = []; // the ring holds RGB canvases
  }

  /** Frees the renderer (and its render-worker state). Frames requested afterwards reject. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.imageRing = [];
    this.raster.close();
  }

  startTurn(options?: FaceTurnOptions): void {
    const last = this.turns.at(-1);
    if (last && !last.ended) last.ended = true;
    const turn: Turn = { id: this.nextTurnId++, chunks: [], queued: 0, ended: false, started: false, played: 0, phonemes: [], segments: [], hint: { from: 0 }, heard: new AudioVisemeTracker(), heardHint: { from: 0 } };
    this.turns.push(turn);
    this.addPhonemes(turn, options?.phonemes);
  }

  /**
   * Phoneme timings arrive with the audio chunk they start in (a TTS's chunk's, shifted to the
   * turn), or as one list of the whole turn so far: timings from the first given one's start on
   * replace what was known from there, earlier ones stay (of those `forget` kept: a list that
   * starts before them replaces them all, which changes no picture still to play).
   */
  private addPhonemes(turn: Turn, list: readonly PhonemeTiming[] | undefined): void {
    if (!list?.length) return;
    const from = list[0]!.startMs;
    let keep = turn.phonemes.length;
    while (keep > 0 && turn.phonemes[keep - 1]!.startMs >= from) keep--;
    turn.phonemes.length = keep;
    for (const p of list) if (Number.isFinite(p.startMs) && Number.isFinite(p.endMs)) turn.phonemes.push(p);
    turn.segments = visemeSegments(turn.phonemes);
    turn.hint.from = 0;
  }

  pushAudio(pcm16k: Int16Array, turn?: FaceTurnOptions): void {
    if (!(pcm16k instanceof Int16Array)) throw new TypeError('pushAudio expects 16 kHz mono Int16Array PCM');
    const last = this.turns.at(-1);
    if (!last || last.ended) this.startTurn(turn);
    const t = this.turns.at(-1)!;
    this.addPhonemes(t, turn?.phonemes);
    if (pcm16k.length === 0) return;
    const copy = pcm16k.slice();
    t.chunks.push(copy);
    t.heard.push(copy);
    t.queued += pcm16k.length;
  }

  endTurn(): void {
    const last = this.turns.at(-1);
    if (last) last.ended = true;
  }

  /**
   * The visitor's voice while they speak (16 kHz mono int16, any chunk size; `null`: they
   * stopped): the face listens (listening.ts). Each frame reads what arrived since the last one.
   */
  listen(pcm16k: Int16Array | null): void {
    if (pcm16k === null) {
      this.heard = [];
      this.framesSinceHeard = Infinity;
      return;
    }
    if (!(pcm16k instanceof Int16Array)) throw new TypeError('listen expects 16 kHz mono Int16Array PCM or null');
    if (pcm16k.length === 0) return;
    this.heard.push(pcm16k.slice());
    // Keep at most a second: a caller that feeds audio while frames are not pulled.
    let total = this.heard.reduce((n, c) => n + c.length, 0);
    while (total > FACE_TIMING.audioSampleRate && this.heard.length > 1) total -= this.heard.shift()!.length;
    this.framesSinceHeard = 0;
  }

  /** The visitor's voice in this frame: the last 40 ms heard since the previous frame. */
  private visitorWindow(): VisitorWindow | undefined {
    if (this.heard.length === 0) {
      this.framesSinceHeard++;
      return this.framesSinceHeard <= SOURCE_DEFAULTS.listenHoldFrames ? { level: 0, pitchHz: 0 } : undefined;
    }
    const total = this.heard.reduce((n, c) => n + c.length, 0);
    const window = new Int16Array(Math.min(SPF, total));
    let at = window.length;
    for (let i = this.heard.length - 1; i >= 0 && at > 0; i--) {
      const c = this.heard[i]!, n = Math.min(at, c.length);
      window.set(c.subarray(c.length - n), at - n);
      at -= n;
    }
    this.heard = [];
    this.framesSinceHeard = 0;
    return { level: analyseWindow(window).level, pitchHz: pitchOf(window) };
  }

  cancel(): boolean {
    const playing = this.turns[0]?.started ? this.turns[0] : undefined;
    const had = this.turns.some((t) => t.queued > 0 || t.started);
    if (playing) this.fading = { turnId: playing.id, left: SOURCE_DEFAULTS.cancelFadeFrames };
    this.turns.length = 0;
    return had;
  }

  nextFrame(): Promise<FaceFrame> {
    let type: FaceFrameType = 'idle';
    let final = false;
    let turnId: number | null = null;
    let audio: Int16Array | undefined;
    let speechSamples: number | undefined;
    let fadeRate: number | undefined;
    let articulation: ArticulationInput | undefined;

    const turn = this.head();
    if (this.fading) {
      type = 'fade-out';
      turnId = this.fading.turnId;
      this.fading.left--;
      const nextReady = turn !== undefined && this.ready(turn);
      if (this.fading.left <= 0 || nextReady) { final = true; this.fading = null; }
      fadeRate = 1 / SOURCE_DEFAULTS.cancelFadeFrames;
    } else if (turn && (turn.started || this.ready(turn))) {
      if (turn.queued > 0) {
        articulation = this.articulationAt(turn, turn.played);
        const before = turn.queued;
        audio = this.take(turn);
        speechSamples = before - turn.queued;
        // The turn's own audio this frame carries: less than a frame after an underrun mid-frame
        // (the rest is padding). Its mouth shapes are read at the turn's audio time, so counting
        // the padding would put every later frame's shapes ahead of its sound.
        turn.played += speechSamples;
        this.forget(turn);
        type = turn.started ? 'speech' : 'speech-start';
        turn.started = true;
        turnId = turn.id;
      } else if (turn.ended) {
        this.turns.shift();
        type = 'fade-out';
        turnId = turn.id;
        this.fading = { turnId: turn.id, left: SOURCE_DEFAULTS.endFadeFrames - 1 };
        fadeRate = 1 / SOURCE_DEFAULTS.endFadeFrames;
        if (this.fading.left <= 0) { final = true; this.fading = null; }
      } else {
        type = 'speech'; // underrun inside an open turn: keep the turn, mouth closes
        turnId = turn.id;
        speechSamples = 0;
      }
    }
    const speaking = type === 'speech' || type === 'speech-start';
    const current = audio ? analyseWindow(audio) : speaking ? analyseWindow(undefined) : undefined;
    const next = turn && speaking ? analyseWindow(this.peek(turn)) : undefined;
    const pose = this.animator.step(current, next, speaking, fadeRate, articulation, this.visitorWindow());
    const index = this.index++;
    return this.rasterise(pose, {
      index,
      ptsMs: index * FACE_TIMING.frameDurationMs,
      type,
      final,
      turnId,
      audio: audio ?? new Int16Array(SPF),
      ...(speechSamples !== undefined ? { speechSamples } : {}),
    });
  }

  /** The first turn, after dropping ended turns that never received audio. */
  private head(): Turn | undefined {
    while (this.turns[0] && this.turns[0].ended && !this.turns[0].started && this.turns[0].queued === 0) this.turns.shift();
    return this.turns[0];
  }

  canStartSpeech(): boolean {
    return this.startable() !== undefined;
  }

  /** The turn a frame going out now would start (`startSpeechIn`), if any. */
  private startable(): Turn | undefined {
    if (this.fading || this.closed) return undefined;
    const turn = this.head();
    if (!turn || turn.started || turn.queued === 0 || !this.ready(turn)) return undefined;
    const margin = ((SOURCE_DEFAULTS.prebufferMs + SOURCE_DEFAULTS.lateStartExtraMs) / 1000) * FACE_TIMING.audioSampleRate;
    return turn.ended || turn.queued >= margin ? turn : undefined;
  }

  startSpeechIn(frame: FaceFrame): FaceFrame {
    if (frame.type !== 'idle') return frame;
    const turn = this.startable();
    if (!turn) return frame;
    const before = turn.queued;
    const audio = this.take(turn);
    const speechSamples = before - turn.queued;
    turn.played += speechSamples;
    turn.started = true;
    return { ...frame, type: 'speech-start', final: false, turnId: turn.id, audio, speechSamples };
  }

  private async rasterise(pose: FacePose, frame: Omit<FaceFrame, 'image'>): Promise<FaceFrame> {
    const ring = this.imageRing;
    const slot = ring.length ? this.ringNext++ % ring.length : -1;
    const target = slot >= 0 ? ring[slot] : undefined;
    if (slot >= 0) ring[slot] = undefined;
    const format = this.imageFormat;
    const { image, mouthGapPx } = await this.raster.render(pose, target, format, this.jpegQuality);
    if (slot >= 0 && ring === this.imageRing) ring[slot] = image;
    this.lastMouthGapPx = mouthGapPx;
    return { ...frame, image: { width: this.width, height: this.height, format, data: image } };
  }

  /**
   * The mouth shape of the frame playing samples [sample, sample + 640) of the turn: from the
   * phoneme timings where they reach that far (they win), else estimated from the audio.
   */
  private articulationAt(turn: Turn, sample: number): ArticulationInput {
    const ms = (sample / FACE_TIMING.audioSampleRate) * 1000;
    const last = turn.segments.at(-1);
    if (last && ms < last.endMs) return { ...articulationAt(turn.segments, ms, turn.hint), fromPhonemes: true };
    // Analysed up to what this frame's articulation reads (its anticipation reaches ~300 ms ahead).
    return { ...articulationAt(turn.heard.segments(ms + AUDIO_LOOKAHEAD_MS, turn.ended), ms, turn.heardHint), fromPhonemes: false };
  }

  /**
   * Drops what lies more than `turnHistoryMs` behind the turn's play position: analysed audio,
   * decided segments, phoneme timings that ended (the last sounding one stays: a pause's length
   * is measured back to it). The frames still to play read nothing of it.
   */
  private forget(turn: Turn): void {
    const history = Math.max(MIN_TURN_HISTORY_MS, this.turnHistoryMs);
    const playedMs = (turn.played / FACE_TIMING.audioSampleRate) * 1000;
    const cutMs = playedMs - history;
    if (!(cutMs > 0)) return;
    // Frames shaped from phoneme timings do not read the audio's analysis: keep it (and so what
    // can be dropped) up with the play position, as far as the next frame's would reach at least.
    turn.heard.settle(playedMs - 10);
    turn.heardHint.from = Math.max(0, turn.heardHint.from - turn.heard.prune(cutMs));
    const phonemes = turn.phonemes;
    let cut = 0;
    while (cut < phonemes.length && phonemes[cut]!.endMs <= cutMs) cut++;
    let sound = cut - 1;
    while (sound >= 0 && !sounds(phonemes[sound]!)) sound--;
    if (cut - (sound >= 0 ? 1 : 0) <= 0) return;
    turn.phonemes = sound >= 0 ? [phonemes[sound]!, ...phonemes.slice(cut)] : phonemes.slice(cut);
    const before = turn.segments.length;
    turn.segments = visemeSegments(turn.phonemes);
    // The kept timings' segments are the same, at the end: the hint keeps pointing at its segment.
    turn.hint.from = Math.max(0, turn.hint.from - (before - turn.segments.length));
  }

  private ready(turn: Turn): boolean {
    return turn.queued >= (SOURCE_DEFAULTS.prebufferMs / 1000) * FACE_TIMING.audioSampleRate || (turn.ended && turn.queued > 0);
  }

  /** Removes the next 640 samples of the turn (zero-padded at the end of a turn). */
  private take(turn: Turn): Int16Array {
    const out = new Int16Array(SPF);
    let filled = 0;
    while (filled < SPF && turn.chunks.length > 0) {
      const c = turn.chunks[0]!;
      const n = Math.min(SPF - filled, c.length);
      out.set(c.subarray(0, n), filled);
      filled += n;
      if (n === c.length) turn.chunks.shift();
      else turn.chunks[0] = c.subarray(n);
    }
    turn.queued -= filled;
    return out;
  }

  private peek(turn: Turn): Int16Array | undefined {
    const c = turn.chunks[0];
    return c ? c.subarray(0, Math.min(SPF, c.length)) : undefined;
  }
}

/** A timing that gives a sound (not a pause), one a pause's length is measured back to. */
const sounds = (p: PhonemeTiming): boolean => p.endMs > p.startMs && !visemesOf(p.phoneme)[0]!.silent;
