/**
 * A single-consumer async queue: producers push, one `for await` loop consumes. With `maxItems`,
 * a push onto a full queue drops its oldest item (counted in `dropped`): for live media, where a
 * consumer that falls behind wants the latest, not an ever longer delay.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiting: ((r: IteratorResult<T>) => void) | undefined;
  private done = false;
  /** Items dropped because the queue was full. */
  dropped = 0;

  constructor(private readonly maxItems = Infinity) {}

  push(item: T): void {
    if (this.done) return;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w({ value: item, done: false });
    } else {
      if (this.items.length >= this.maxItems) {
        this.items.shift();
        this.dropped++;
      }
      this.items.push(item);
    }
  }

  close(): void {
    this.done = true;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w({ value: undefined, done: true });
    }
  }

  get size(): number {
    return this.items.length;
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length) return Promise.resolve({ value: this.items.shift()!, done: false });
        if (this.done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
      },
      return: () => {
        this.close();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
