/**
 * The fake LiveKit server's SCTP delivers every complete message (test/fakes/livekit-media.ts,
 * `popCompleteMessages` in the place of werift 0.24.4's `InboundStream.popMessages`, which yields
 * at most one message per call when the next one's TSNs do not follow: werift-webrtc issue 706).
 * Chunks go into a real werift InboundStream (its own `addChunk`, which keeps them in TSN order).
 * Serial: the last test mends werift's prototype, which the first reads unmended.
 */
import test from 'ava';
import { mendSctpReassembly, newInboundStream, popCompleteMessages } from '../fakes/livekit-media.ts';

const LAST = 0x01;
const FIRST = 0x02;
const UNORDERED = 0x04;

interface Stream {
  streamSequenceNumber: number;
  reassembly: unknown[];
  addChunk(chunk: object): void;
  popMessages(): Iterable<[number, number, Buffer]>;
}

/** A werift InboundStream, and werift's popMessages as it is at the call (its own until mended). */
function inboundStream(): { stream: Stream; original: Stream['popMessages'] } {
  const stream = newInboundStream() as Stream;
  return { stream, original: Object.getPrototypeOf(stream).popMessages as Stream['popMessages'] };
}

const chunk = (tsn: number, ssn: number, flags: number, text: string) => ({ tsn, streamId: 0, streamSeqNum: ssn, protocol: 51, flags, userData: Buffer.from(text) });
const texts = (messages: Iterable<[number, number, Buffer]>) => [...messages].map(([, , data]) => data.toString());

test.serial('two complete ordered messages whose TSNs do not follow each other (another stream between them) both come out', (t) => {
  const { stream, original } = inboundStream();
  stream.addChunk(chunk(1, 0, FIRST | LAST, 'one'));
  stream.addChunk(chunk(3, 1, FIRST | LAST, 'two')); // TSN 2 went to the other stream
  // The bug, shown on a copy: werift's own yields the first only.
  const copy = { ...stream, reassembly: [...stream.reassembly], streamSequenceNumber: 0 };
  t.deepEqual(texts(original.call(copy)), ['one'], 'werift 0.24.4 leaves the second in its buffer');
  t.deepEqual(texts(popCompleteMessages.call(stream as never)), ['one', 'two']);
  t.is(stream.streamSequenceNumber, 2);
  t.deepEqual(stream.reassembly, []);
});

test.serial('an ordered message that came first waits for the one before it, then both come out in order', (t) => {
  const { stream } = inboundStream();
  stream.addChunk(chunk(3, 1, FIRST | LAST, 'second'));
  t.deepEqual(texts(popCompleteMessages.call(stream as never)), []);
  stream.addChunk(chunk(1, 0, FIRST | LAST, 'first'));
  t.deepEqual(texts(popCompleteMessages.call(stream as never)), ['first', 'second']);
});

test.serial('a fragmented message waits for its last fragment, and its fragments are joined', (t) => {
  const { stream } = inboundStream();
  stream.addChunk(chunk(5, 0, FIRST, 'he'));
  stream.addChunk(chunk(7, 0, LAST, 'o'));
  t.deepEqual(texts(popCompleteMessages.call(stream as never)), [], 'TSN 6 missing');
  t.is(stream.reassembly.length, 2, 'nothing dropped');
  stream.addChunk(chunk(6, 0, 0, 'll'));
  t.deepEqual(texts(popCompleteMessages.call(stream as never)), ['hello']);
  t.is(stream.streamSequenceNumber, 1);
});

test.serial('unordered messages come out when complete, past an incomplete one', (t) => {
  const { stream } = inboundStream();
  stream.addChunk(chunk(10, 0, UNORDERED | FIRST, 'part'));
  stream.addChunk(chunk(12, 0, UNORDERED | FIRST | LAST, 'whole'));
  stream.addChunk(chunk(14, 0, UNORDERED | FIRST | LAST, 'also'));
  t.deepEqual(texts(popCompleteMessages.call(stream as never)), ['whole', 'also']);
  t.is(stream.reassembly.length, 1, 'the incomplete one stays');
});

test.serial('mendSctpReassembly puts it in werift\'s InboundStream', (t) => {
  mendSctpReassembly();
  const { stream } = inboundStream();
  t.is(stream.popMessages as unknown, popCompleteMessages as unknown);
});
