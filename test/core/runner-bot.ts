/**
 * A bot script for the runner test: a list of processors run by `runBot` with process signals
 * handled. It prints `ready` once started and its outcome as JSON when it finishes, then exits on
 * its own: the runner leaves nothing running (no process.exit here on purpose).
 */
import { FrameProcessor, PassThroughProcessor, frame, runBot, type Direction, type Frame } from '../../core/index.ts';

/** Stands in for an input transport: a real interval timer that feeds the bot while it runs. */
class TickingInput extends FrameProcessor {
  private timer: NodeJS.Timeout | undefined;
  protected override onStart(): void {
    this.timer = setInterval(() => this.push(frame('text', { text: 'tick' })), 20);
  }
  protected override process(f: Frame, direction: Direction): void {
    if (f.type === 'end' || f.type === 'cancel') clearInterval(this.timer);
    this.push(f, direction);
  }
  override cleanup(): void {
    clearInterval(this.timer);
    super.cleanup();
  }
}

const outcome = await runBot([new TickingInput(), new PassThroughProcessor()], {
  handleSignals: true,
  heartbeatMs: 50,
  onEvent: (e) => {
    if (e.type === 'started') console.log('ready');
  },
});
console.log(JSON.stringify(outcome));
