/**
 * A socket handed to a child process (server/sessions/socket-handover.ts, how the server gives
 * the bot host a room's signalling socket) loses none of the bytes its peer sends after the child
 * answered, even when the child's acknowledgement of the socket is late: the child is busy and
 * its messages to this process are backed up behind a large one, while this process is free to
 * read. Node keeps a sent socket open and reading (into nothing) in the sender until that
 * acknowledgement; without the handover's readStop the peer's answer is read here and lost.
 */
import test from 'ava';
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { handOverSocket } from '../../server/sessions/socket-handover.ts';

const CHILD = fileURLToPath(new URL('./fixtures/handover-child.mjs', import.meta.url));

function message<T>(child: ChildProcess, t: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: { t: string }) => {
      if (m.t !== t) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(m as T);
    };
    const onExit = (code: number | null) => reject(new Error(`the child exited (${code}) before '${t}'`));
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

test('a peer answering a handed-over socket at once is heard by the child, with the child busy and its messages to the sender backed up', async (t) => {
  t.timeout(30_000);
  const child = fork(CHILD, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const server = createServer();
  const peers: Socket[] = [];
  t.teardown(() => {
    child.kill('SIGKILL');
    for (const s of peers) s.destroy();
    server.close();
  });
  await message(child, 'ready');
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const peer = connect(port, '127.0.0.1');
  peers.push(peer);
  // The peer answers the child's `go` at once, as a visitor sends `join` on the upgrade's answer.
  let heard = '';
  peer.on('data', (chunk) => {
    heard += chunk.toString('utf8');
    if (heard === 'go\n') peer.write('join\n');
  });
  const [socket] = await accepted;
  peers.push(socket);
  // The child's next message to this process is 8 MB: far more than the pipe holds, so its
  // acknowledgement of the socket waits behind it while the child is busy.
  child.send({ t: 'flood', bytes: 8 * 1024 * 1024 });
  const errors: Error[] = [];
  handOverSocket(child, { t: 'take', busyMs: 1500 }, socket, (err) => errors.push(err));
  const got = await message<{ data: string }>(child, 'got');
  t.is(heard, 'go\n', 'the peer heard the child answer');
  t.is(got.data, 'join\n', "the child heard the peer's answer");
  t.deepEqual(errors, []);
});
