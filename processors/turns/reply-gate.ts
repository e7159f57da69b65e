/**
 * ReplyGate: holds a preemptive reply until the user's turn really ends. It sits between the TTS
 * and the avatar (or the output), so a reply started on a pause has its text and audio made but
 * none of it reaches the face or the speaker until the user aggregator decides
 * (`reply-decision`): `use` lets the held frames go in order, a discard drops them. The frames of
 * a reply are those between its `reply-start` and `reply-end` markers (the markers themselves go
 * no further); frames after an undecided reply wait behind it, so order is kept.
 *
 * A decision can overtake its reply's frames (it is a system frame; the reply may still be in the
 * LLM's or the TTS's queue): it is remembered until the reply's markers come.
 */
import { isSystemFrame, type Direction, type Frame } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';

interface HeldReply {
  readonly replyId: string;
  /** undefined: not decided yet. */
  use: boolean | undefined;
  ended: boolean;
}

/** Decisions remembered for replies whose markers have not come yet. */
const MAX_EARLY_DECISIONS = 32;

export class ReplyGate extends FrameProcessor {
  /** The reply whose frames are passing now (or held), if any. */
  private reply: HeldReply | null = null;
  /** Frames waiting for the reply's decision: its own, then any that came after it. */
  private held: { frame: Frame; ofReply: boolean }[] = [];
  private readonly early = new Map<string, boolean>();
  /** Frames dropped with discarded replies (tests, diagnostics). */
  dropped = 0;

  constructor(options: ProcessorOptions = {}) {
    super(options);
  }

  /** A reply is held, waiting for its decision. */
  get holding(): boolean {
    return this.reply !== null && this.reply.use === undefined;
  }

  protected override process(f: Frame, direction: Direction): void {
    if (direction === 'upstream') return this.push(f, direction);
    switch (f.type) {
      case 'reply-start':
        this.begin(f.replyId);
        return;
      case 'reply-end':
        this.finish(f.replyId);
        return;
      case 'reply-decision':
        this.push(f, direction);
        this.decide(f.replyId, f.use);
        return;
      case 'interruption':
      case 'cancel':
        this.reply = null;
        this.held = [];
        this.early.clear();
        break;
      default:
        break;
    }
    if (isSystemFrame(f)) return this.push(f, direction);
    this.pass(f);
  }

  private begin(replyId: string): void {
    // One reply is undecided at a time: the user aggregator discards one before starting another.
    if (this.reply) {
      this.reply.ended = true;
      if (this.reply.use === undefined) this.decide(this.reply.replyId, false);
    }
    const use = this.early.get(replyId);
    this.early.delete(replyId);
    this.reply = { replyId, use, ended: false };
  }

  private finish(replyId: string): void {
    if (this.reply?.replyId !== replyId) return;
    this.reply.ended = true;
    if (this.reply.use !== undefined) this.reply = null;
  }

  private decide(replyId: string, use: boolean): void {
    const reply = this.reply;
    if (reply?.replyId !== replyId) {
      this.early.set(replyId, use);
      if (this.early.size > MAX_EARLY_DECISIONS) this.early.delete(this.early.keys().next().value!);
      return;
    }
    reply.use = use;
    const held = this.held;
    this.held = [];
    if (reply.ended) this.reply = null;
    for (const h of held) {
      if (use || !h.ofReply) this.push(h.frame);
      else this.dropped++;
    }
  }

  /** An ordered frame: passes, is held behind an undecided reply, or dropped with a discarded one. */
  private pass(f: Frame): void {
    const reply = this.reply;
    if (!reply) return this.push(f);
    if (reply.use === undefined) {
      this.held.push({ frame: f, ofReply: !reply.ended });
      return;
    }
    if (reply.use || reply.ended) return this.push(f);
    this.dropped++;
  }
}
