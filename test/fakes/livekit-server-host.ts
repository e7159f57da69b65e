/**
 * The fake LiveKit server (livekit-server.ts) in a process of its own, started by
 * `startLiveKitServerFake` (livekit-server-process.ts) over an IPC channel: what the fake records
 * goes to the parent as it changes (every `MIRROR_INTERVAL_MS`, only what is new), and the
 * parent's calls (deleteRoom, cutOff, ...) are answered after the state they changed. The process
 * ends when the channel closes: its parent called close, exited or was killed.
 *
 * Started without a channel (`tsx test/fakes/livekit-server-host.ts`, as the Python client's tests
 * do), it prints `url <ws url> key <api key> secret <api secret>` once it listens and ends when its
 * stdin closes.
 */
import { startLiveKitServerFakeHere, type LiveKitServerFake, type LiveKitServerFakeOptions } from './livekit-server.ts';
import { FAKE_LISTS, MIRROR_INTERVAL_MS, PARTICIPANT_LISTS, type FakeCall, type FakeHostMessage, type FakeStateDelta, type ParticipantDelta } from './livekit-server-process.ts';

const options = JSON.parse(process.argv[2] ?? '{}') as LiveKitServerFakeOptions;
// Heard from the start: a parent gone while the fake starts (seconds under load) ends this process
// once it listens, instead of leaving it serving with nobody to stop it.
let parentGone = false;
process.once('disconnect', () => (parentGone = true));
const fake = await startLiveKitServerFakeHere(options, { beforeAnswer: () => push() });

/** What the parent has: per participant the lengths of its lists and the last changeable part sent. */
const sent = new Map<string, { lengths: Record<string, number>; part: string }>();
const topSent: Record<string, number> = {};
let roomsSent = '';

function delta(): FakeStateDelta | undefined {
  const participants: ParticipantDelta[] = [];
  for (const p of fake.participants) {
    const known = sent.get(p.sid);
    const part = JSON.stringify({ state: p.state, leftBy: p.leftBy ?? null, publisherState: p.publisherState, subscriberState: p.subscriberState, media: p.media, tracks: p.tracks });
    if (!known) {
      sent.set(p.sid, { lengths: Object.fromEntries(PARTICIPANT_LISTS.map((key) => [key, p[key].length])), part });
      participants.push({ sid: p.sid, initial: p, lists: {} });
      continue;
    }
    const lists: ParticipantDelta['lists'] = {};
    for (const key of PARTICIPANT_LISTS) {
      const list = p[key] as unknown[];
      const from = known.lengths[key] ?? 0;
      if (list.length > from) {
        lists[key] = { from, items: list.slice(from) };
        known.lengths[key] = list.length;
      }
    }
    const changed = part !== known.part;
    if (!changed && Object.keys(lists).length === 0) continue;
    known.part = part;
    participants.push({ sid: p.sid, ...(changed ? { part: JSON.parse(part) as ParticipantDelta['part'] } : {}), lists });
  }
  const lists: FakeStateDelta['lists'] = {};
  for (const key of FAKE_LISTS) {
    const list = fake[key] as unknown[];
    const from = topSent[key] ?? 0;
    if (list.length > from) {
      lists[key] = { from, items: list.slice(from) };
      topSent[key] = list.length;
    }
  }
  const rooms = JSON.stringify([...fake.createdRooms]);
  const roomsChanged = rooms !== roomsSent;
  roomsSent = rooms;
  if (participants.length === 0 && Object.keys(lists).length === 0 && !roomsChanged) return undefined;
  return { participants, lists, ...(roomsChanged ? { createdRooms: JSON.parse(rooms) as FakeStateDelta['createdRooms'] } : {}) };
}

function post(message: FakeHostMessage): void {
  // With a callback, a channel closing under the send is reported to it rather than thrown.
  if (process.connected) process.send!(message, undefined, undefined, () => undefined);
}

function push(): void {
  // Without a parent to mirror to (stdin mode, or the parent gone), nothing is worked out.
  if (!process.connected) return;
  const d = delta();
  if (d) post({ type: 'state', delta: d });
}

async function call(c: FakeCall): Promise<unknown> {
  const f: LiveKitServerFake = fake;
  switch (c.method) {
    case 'deleteRoom':
      return f.deleteRoom(c.args[0]);
    case 'cutOff':
      return f.cutOff(c.args[0]);
    case 'restore':
      return f.restore(c.args[0]);
    case 'dropSignal':
      return f.dropSignal(c.args[0]);
    case 'inboundStats':
      return f.inboundStats(c.args[0]);
  }
}

process.on('message', (message: FakeCall) => {
  void call(message).then(
    (result) => {
      push();
      post({ type: 'reply', id: message.id, result: result ?? null });
    },
    (error: unknown) => {
      push();
      post({ type: 'reply', id: message.id, error: error instanceof Error ? error.message : String(error) });
    },
  );
});
function end(timer?: NodeJS.Timeout): void {
  clearInterval(timer);
  void fake.close().finally(() => process.exit(0));
}
if (process.send) {
  const timer = setInterval(push, MIRROR_INTERVAL_MS);
  if (parentGone || !process.connected) end(timer);
  else process.once('disconnect', () => end(timer));
  push();
  post({ type: 'ready', url: fake.url, apiKey: fake.apiKey, apiSecret: fake.apiSecret });
} else {
  process.stdout.write(`url ${fake.url} key ${fake.apiKey} secret ${fake.apiSecret}\n`);
  process.stdin.on('end', () => end()).resume();
}

