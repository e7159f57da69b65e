/**
 * AvatarProcessor: put it after any TTS and the bot gets a face. It feeds the TTS audio (at
 * 16 kHz, with phoneme timings when the TTS gives them) to a face session and emits what the
 * session renders: for every 40 ms, an `output-image` and the `output-audio` that plays with
 * it, as a pair, so no transport can drift them apart. Idle frames (blinks, breathing) keep
 * the video alive between turns; they carry images only, so the output does not take silence
 * for speech.
 *
 * Words as played. The face plays a turn's audio later than the TTS made it (a TTS streams
 * faster than real time; the face plays 40 ms per frame), so a chunk's words are not passed on
 * when the chunk arrives: each word is placed on the turn's audio timeline (its timing from the
 * TTS, shifted by the audio of the turn before its chunk; words without usable timings are
 * spread evenly over their chunk's audio) and released, as an empty `tts-audio` carrying it,
 * just before the `output-audio` of the speech frame that plays its first sample. The output
 * transport (the playback clock) then reports it as `tts-text` when it writes that frame's
 * audio. Which audio a speech frame plays is read from the frame itself: the next samples of
 * the turn when they match what was fed, nothing when the face ran dry (an underrun frame is
 * silent). An interruption drops the words not yet released, so the assistant's context and
 * the transcript hold only what was heard; a turn that plays to its end releases all its words
 * with its last frame, before the held `tts-stopped`.
 *
 * A face that listens. While the user speaks (between `user-started-speaking` and
 * `user-stopped-speaking`), their `input-audio` goes to the face session's optional `listen`
 * (at 16 kHz), so the face nods and attends instead of idling as if alone.
 *
 * Pause and resume (`bot-pause`, `bot-pause-ended`; processors/turns: visitor sound over the bot).
 * A pause cancels the face's speech (its audio stops with the next frame, the mouth returns to
 * rest) but keeps every turn's unplayed audio, phonemes and words; audio the TTS sends meanwhile
 * is kept too. A resume starts a face turn with the audio from the first sample not played, so
 * nothing is skipped or repeated and the words keep their places; an interruption drops it all.
 *
 * The face session is in-process (a FaceModel from the registry) or remote (over /realtime);
 * the processor only sees the FaceSession contract. `tts-stopped` is held until the turn's
 * last frame has been emitted, so the output stops "speaking" when the face does.
 */
import type { Subscription } from 'rxjs';
import { StreamResampler, concat } from '../../core/audio.ts';
import { frame, type Direction, type Frame, type PhonemeTiming, type WordTiming } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { Clock } from '../../core/clock.ts';
import { errorMessage } from '../../core/error-message.ts';
import { FACE_TIMING, type FaceFrame, type FaceSession } from './face-model.ts';

/** Opens a face session on the pipeline's clock (in-process model or remote client). */
export type FaceSessionFactory = (clock: Clock) => Promise<FaceSession>;

const SAMPLES_PER_MS = FACE_TIMING.audioSampleRate / 1000;

/** A word waiting for the speech frame that plays its first sample. */
interface PendingWord {
  readonly word: string;
  /** Position of its first sample in the turn's 16 kHz audio. */
  readonly atSample: number;
}

/**
 * One turn as fed to the face: the audio not yet played (to recognise it in the frames) and the
 * words not yet released. Turns are played by the face in the order they were started.
 */
interface PlayoutTurn {
  /** Audio fed and not yet matched to a played frame, oldest first (16 kHz). */
  readonly unplayed: Int16Array[];
  fedSamples: number;
  playedSamples: number;
  readonly words: PendingWord[];
  /** The face's id for this turn, once its first speech frame was seen. */
  faceTurnId: number | null;
  /** No more audio will be fed (the face ends it once its audio has played). */
  ended: boolean;
  /** Phoneme timings of the turn's audio (ms from the turn's first sample), kept for a resume. */
  readonly phonemes: PhonemeTiming[];
  /** Where the face's current turn for it started in the turn's audio (ms): 0, or the resume point. */
  faceStartMs: number;
}

export class AvatarProcessor extends FrameProcessor {
  private session: FaceSession | undefined;
  private subscription: Subscription | undefined;
  private readonly resampling = new StreamResampler(FACE_TIMING.audioSampleRate);
  /** Audio (ms) of the current turn sent to the face, to place phoneme timings. */
  private turnMs = 0;
  private turnOpen = false;
  private heldStop: Frame | undefined;
  /** Turn whose speech frames are playing; after an interruption its late frames are muted. */
  private playingTurn: number | null = null;
  private cancelledTurn: number | null = null;
  /** Turns fed to the face whose words are not all released yet, in play order. */
  private readonly playout: PlayoutTurn[] = [];
  /** The user is speaking (their audio goes to the face's `listen`), and its conversion to 16 kHz. */
  private userSpeaking = false;
  private readonly listenResampling = new StreamResampler(FACE_TIMING.audioSampleRate);
  /** Paused by visitor sound: audio is kept, not sent to the face. */
  private paused = false;
  /** Face turns cancelled by a pause: their last frame ends nothing (the turn resumes). */
  private readonly pausedFaceTurns = new Set<number>();
  /** Frames emitted (diagnostics, benchmarks). */
  framesOut = 0;
  /** Speech frames whose audio did not match what was fed (a face that alters audio); counted as played. */
  unmatchedFrames = 0;

  /** The pipeline ended or was cancelled: a session that opens afterwards is closed at once. */
  private finished = false;

  constructor(private readonly openSession: FaceSessionFactory, options: ProcessorOptions = {}) {
    super(options);
  }

  protected override async onStart(): Promise<void> {
    const session = await this.openSession(this.clock);
    if (this.finished) {
      // Cancelled (or ended) while the session was opening: nothing will ever close it otherwise,
      // and its frame timer would keep the process alive (local CI run K: 'Failed to exit').
      session.close();
      return;
    }
    this.session = session;
    this.subscription = session.frames.subscribe({
      next: (f) => this.emitFrame(f),
      // A face that stops rendering (its render worker died, a remote face lost its connection)
      // ends its frames with an error. Without this handler rxjs rethrows it from a timer, an
      // uncaught exception that took the whole process down, every session on it.
      error: (err: unknown) => this.onFaceFailed(err),
    });
  }

  /** The face's frames ended in an error: this pipeline cannot go on without its face, so it ends (fatal). */
  private onFaceFailed(err: unknown): void {
    this.release();
    if (this.finished) return;
    // Its turns will never play out now: the fatal error ends the pipeline (the worker cancels it).
    this.heldStop = undefined;
    this.playout.length = 0;
    this.pushError(`the face stopped rendering: ${errorMessage(err)}`, { fatal: true, code: 'face_failed', cause: err });
  }

  protected override async onEnd(): Promise<void> {
    this.finished = true;
    await this.session?.end();
    this.release();
  }

  protected override onCancel(): void {
    this.finished = true;
    this.session?.close();
    this.release();
  }

  protected override process(f: Frame, direction: Direction): void {
    if (direction === 'upstream') return this.push(f, direction);
    switch (f.type) {
      case 'user-started-speaking':
        this.userSpeaking = true;
        break;
      case 'user-stopped-speaking':
        this.userSpeaking = false;
        this.listenResampling.reset();
        this.session?.listen?.(null);
        break;
      case 'input-audio':
        if (this.userSpeaking) this.hear(f.pcm, f.sampleRate, f.channels);
        break;
      case 'tts-started':
        this.startTurn();
        break;
      case 'tts-audio':
        this.feed(f.pcm, f.sampleRate, f.channels, f.phonemes, f.words);
        return;
      case 'tts-stopped':
        if (this.turnOpen) {
          this.flushResampler();
          this.turnOpen = false;
          if (!this.paused) this.session?.endTurn();
          const turn = this.playout.at(-1);
          if (turn) turn.ended = true;
          if (turn && turn.fedSamples > 0) {
            this.heldStop = f;
            return;
          }
          // A turn without audio (its synthesis failed): the face plays nothing, so no last
          // frame would ever release the stop. Its words (if any) were never heard.
          if (turn) this.playout.splice(this.playout.indexOf(turn), 1);
        }
        break;
      case 'bot-pause':
        this.pause();
        break;
      case 'bot-pause-ended':
        if (f.outcome === 'resumed') this.resume();
        break;
      case 'interruption':
        this.paused = false;
        this.session?.cancel();
        this.cancelledTurn = this.playingTurn;
        this.turnOpen = false;
        this.heldStop = undefined;
        this.resampling.reset();
        // Words not yet played are never heard: the output must not report them.
        this.playout.length = 0;
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  /** The user's voice to the face (mono only; input transports deliver mono). */
  private hear(pcm: Int16Array, sampleRate: number, channels: number): void {
    const listen = this.session?.listen;
    if (!listen || channels !== 1 || pcm.length === 0 || !(sampleRate > 0)) return;
    const audio = this.listenResampling.convert(pcm, sampleRate);
    if (audio.length) listen.call(this.session, audio);
  }

  private startTurn(): void {
    this.flushResampler();
    if (!this.paused) this.session?.startTurn();
    const last = this.playout.at(-1);
    if (last) last.ended = true;
    this.playout.push({ unplayed: [], fedSamples: 0, playedSamples: 0, words: [], faceTurnId: null, ended: false, phonemes: [], faceStartMs: 0 });
    this.turnOpen = true;
    this.turnMs = 0;
  }

  private feed(
    pcm: Int16Array,
    sampleRate: number,
    channels: number,
    phonemes: readonly PhonemeTiming[] | undefined,
    words: readonly WordTiming[] | undefined,
  ): void {
    if (!this.session) return;
    if (!this.turnOpen) this.startTurn();
    const turn = this.playout.at(-1)!;
    let audio: Int16Array = new Int16Array(0);
    if (channels === 1 && pcm.length > 0) {
      audio = this.resampling.convert(pcm, sampleRate);
    }
    const offset = this.turnMs;
    if (words?.length) this.placeWords(turn, words, offset, channels === 1 && sampleRate > 0 ? (pcm.length / sampleRate) * 1000 : 0);
    if (audio.length === 0) return;
    const shifted = phonemes?.map((p) => ({ ...p, startMs: p.startMs + offset, endMs: p.endMs + offset }));
    if (shifted?.length) turn.phonemes.push(...shifted);
    const forFace = shifted?.map((p) => ({ ...p, startMs: p.startMs - turn.faceStartMs, endMs: p.endMs - turn.faceStartMs }));
    this.pushToFace(turn, audio, forFace?.length ? forFace : undefined);
  }

  private pushToFace(turn: PlayoutTurn, audio: Int16Array, phonemes?: readonly PhonemeTiming[]): void {
    if (!this.paused) this.session!.pushAudio(audio, phonemes ? { phonemes } : undefined);
    turn.unplayed.push(audio);
    turn.fedSamples += audio.length;
    this.turnMs += audio.length / SAMPLES_PER_MS;
  }

  /**
   * Puts a chunk's words on the turn's timeline: at the chunk's offset plus their own start when
   * the TTS timed them (clamped to the chunk's end; a negative start is a word whose audio came
   * in earlier chunks, as a TTS that does not hold audio for its timings sends them, clamped to
   * the turn's start), else spread evenly over the chunk's audio. Never before a word already
   * placed (words are said in order).
   */
  private placeWords(turn: PlayoutTurn, words: readonly WordTiming[], offsetMs: number, chunkMs: number): void {
    const timed = words.every((w) => Number.isFinite(w.startMs));
    let floor = turn.words.at(-1)?.atSample ?? 0;
    words.forEach((w, i) => {
      const text = typeof w.word === 'string' ? w.word.trim() : '';
      if (!text) return;
      const within = timed ? Math.max(-offsetMs, Math.min(w.startMs, chunkMs)) : (i * chunkMs) / words.length;
      const atSample = Math.max(floor, Math.floor((offsetMs + within) * SAMPLES_PER_MS));
      floor = atSample;
      turn.words.push({ word: text, atSample });
    });
  }

  /** At a turn's end (or a new turn), what the resampler still holds belongs to this turn. */
  private flushResampler(): void {
    const tail = this.resampling.flush();
    const turn = this.playout.at(-1);
    if (!turn || !this.turnOpen || !this.session) return;
    if (tail.length) this.pushToFace(turn, tail);
  }

  private emitFrame(frameIn: FaceFrame): void {
    let f = frameIn;
    this.framesOut++;
    let speech = f.type === 'speech' || f.type === 'speech-start';
    if (speech && f.turnId !== null && f.turnId === this.cancelledTurn) {
      // A remote face may still deliver frames it rendered before it heard the cancel: the
      // picture is shown as the start of the fade, the audio is not played.
      f = { ...f, type: 'fade-out' };
      speech = false;
    } else {
      this.cancelledTurn = null;
    }
    if (speech) this.playingTurn = f.turnId;
    else if (f.type !== 'fade-out') this.playingTurn = null;
    // The words this frame starts go just before its picture and audio (which stay a pair).
    if (speech) this.releaseWords(this.played(f));
    this.push(frame('output-image', { ...f.image, frameIndex: f.index, frameType: f.type }, { pts: f.ptsMs }));
    if (speech) this.push(frame('output-audio', { pcm: f.audio, sampleRate: FACE_TIMING.audioSampleRate, channels: 1 }, { pts: f.ptsMs }));
    if (f.final && f.turnId !== null && this.pausedFaceTurns.delete(f.turnId)) return;
    if (f.final) {
      // The face finished a turn (played to its end, or faded after a cancel): whatever words of
      // a turn that played to its end are left (timings past its last sample) were heard with it.
      this.finishTurn(f.turnId);
      if (this.heldStop) {
        const stop = this.heldStop;
        this.heldStop = undefined;
        this.push(stop);
      }
    }
  }

  /**
   * The turn a speech frame belongs to, and how much of its audio the frame played: the next
   * samples fed when they match (all 640, or fewer zero-padded at the turn's end), none when the
   * frame is silence the turn did not have (the face ran dry).
   */
  private played(f: FaceFrame): PlayoutTurn | undefined {
    let turn = this.playout.find((t) => t.faceTurnId === f.turnId);
    if (!turn) {
      // A new face turn: the oldest turn not bound yet that has audio (the face skips turns without).
      turn = this.playout.find((t) => t.faceTurnId === null && t.fedSamples > 0);
      if (!turn) return undefined;
      turn.faceTurnId = f.turnId;
      // Turns before it are over (the face plays turns in order): turns that never had audio,
      // whose words (if any) nobody heard.
      this.playout.splice(0, this.playout.indexOf(turn));
    }
    const left = turn.fedSamples - turn.playedSamples;
    if (left <= 0) return turn;
    const n = Math.min(left, f.audio.length);
    if (this.matches(turn, f.audio, n)) this.consume(turn, n);
    else if (!isSilent(f.audio)) {
      // A face that changed the audio (it should not): count the frame as played.
      this.unmatchedFrames++;
      this.consume(turn, n);
    }
    return turn;
  }

  private matches(turn: PlayoutTurn, audio: Int16Array, n: number): boolean {
    let i = 0;
    for (const chunk of turn.unplayed) {
      for (let j = 0; j < chunk.length && i < n; j++, i++) if (chunk[j] !== audio[i]) return false;
      if (i >= n) break;
    }
    for (; i < audio.length; i++) if (audio[i] !== 0) return false;
    return true;
  }

  private consume(turn: PlayoutTurn, n: number): void {
    turn.playedSamples += n;
    let left = n;
    while (left > 0 && turn.unplayed.length) {
      const chunk = turn.unplayed[0]!;
      if (chunk.length <= left) {
        left -= chunk.length;
        turn.unplayed.shift();
      } else {
        turn.unplayed[0] = chunk.subarray(left);
        left = 0;
      }
    }
  }

  /**
   * Releases the words whose first sample this frame plays, as an empty `tts-audio` carrying
   * them just before the frame's audio: the output announces them with that audio. When the
   * frame played the last audio of an ended turn, all its words are released.
   */
  private releaseWords(turn: PlayoutTurn | undefined): void {
    if (!turn) return;
    const done = turn.ended && turn.playedSamples >= turn.fedSamples;
    let n = 0;
    while (n < turn.words.length && (done || turn.words[n]!.atSample < turn.playedSamples)) n++;
    if (n === 0) return;
    const words = turn.words.splice(0, n);
    this.push(
      frame('tts-audio', {
        pcm: new Int16Array(0),
        sampleRate: FACE_TIMING.audioSampleRate,
        channels: 1,
        words: words.map((w) => ({ word: w.word, startMs: 0, endMs: 0 })),
      }),
    );
  }

  /** The face's last frame of `faceTurnId` (after its fade-out): the turn is over. */
  private finishTurn(faceTurnId: number | null): void {
    const turn = this.playout.find((t) => t.faceTurnId === faceTurnId);
    if (!turn) return;
    this.playout.splice(this.playout.indexOf(turn), 1);
    // Words still held belong to a turn that ended after its audio had played out (the TTS
    // ended it late): they were heard with its last speech frame, which has been written, so
    // they go as words played now (no audio frame follows to carry them).
    if (turn.ended && turn.playedSamples >= turn.fedSamples && turn.words.length) {
      this.push(frame('tts-text', { text: turn.words.map((w) => w.word).join(' ') }));
    }
  }

  /** Visitor sound over the bot: the face stops speaking; what it had not played is kept. */
  private pause(): void {
    if (this.paused || !this.session) return;
    this.paused = true;
    this.session.cancel();
    this.cancelledTurn = this.playingTurn;
    for (const turn of this.playout) {
      if (turn.faceTurnId !== null) this.pausedFaceTurns.add(turn.faceTurnId);
      turn.faceTurnId = null;
    }
  }

  /** A false interruption: each turn goes on from its first sample not played. */
  private resume(): void {
    if (!this.paused || !this.session) return;
    this.paused = false;
    for (const turn of [...this.playout]) {
      turn.faceStartMs = turn.playedSamples / SAMPLES_PER_MS;
      const left = concat(turn.unplayed);
      if (left.length === 0) {
        if (turn.ended) this.finishResumed(turn);
        continue;
      }
      const phonemes = turn.phonemes
        .filter((p) => p.endMs > turn.faceStartMs)
        .map((p) => ({ ...p, startMs: Math.max(0, p.startMs - turn.faceStartMs), endMs: p.endMs - turn.faceStartMs }));
      this.session.startTurn();
      this.session.pushAudio(left, phonemes.length ? { phonemes } : undefined);
      if (turn.ended) this.session.endTurn();
    }
  }

  /** A turn whose audio had all played when the pause came: it is over now. */
  private finishResumed(turn: PlayoutTurn): void {
    this.playout.splice(this.playout.indexOf(turn), 1);
    if (turn.words.length) this.push(frame('tts-text', { text: turn.words.map((w) => w.word).join(' ') }));
    if (this.heldStop && this.playout.length === 0) {
      const stop = this.heldStop;
      this.heldStop = undefined;
      this.push(stop);
    }
  }

  private release(): void {
    this.subscription?.unsubscribe();
    this.subscription = undefined;
    this.session = undefined;
  }
}

function isSilent(audio: Int16Array): boolean {
  for (let i = 0; i < audio.length; i++) if (audio[i] !== 0) return false;
  return true;
}
