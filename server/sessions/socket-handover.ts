/**
 * Hands a connected socket to a child process (the bot host takes the signalling sockets of the
 * rooms it owns) so that not a byte the peer sends afterwards is lost.
 *
 * Node's `child.send(message, socket)` keeps the sent descriptor open in the sender until the
 * child acknowledges it, and keeps reading it meanwhile, into nothing (`onread` becomes a no-op).
 * The child answers its peer as soon as it has the socket (the host answers the upgrade), and the
 * peer answers at once (a visitor sends `join`); when the acknowledgement is late (the child's
 * messages to the sender backed up behind a large one, the child busy), those bytes can be read
 * here first and are gone. So this process stops reading before it sends: a descriptor it no
 * longer reads is read only by the child. (`_handle` is Node's private field of a socket; there
 * is no public way to stop a handle's reads before `child.send`.)
 *
 * The socket is cut from its server first: not as cluster workers do (a socket of a server is
 * tracked in the child then, and that server's close() waits for the child's answer: forever once
 * the child is gone); it is destroyed here once sent, which counts it out of the server's
 * connections (its descriptor is the child's by then).
 */
import type { ChildProcess, Serializable } from 'node:child_process';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';

type SentSocket = Socket & { server: unknown; _handle?: { readStop?: () => number } | null };

/** Sends `socket` with `message` to `child`; `onError` hears a send that failed (the socket is destroyed either way). */
export function handOverSocket(child: ChildProcess, message: Serializable, socket: Duplex, onError: (err: Error) => void): void {
  const sent = socket as SentSocket;
  sent.server = null;
  sent._handle?.readStop?.();
  child.send(message, sent, (err) => {
    if (err) onError(err);
    socket.destroy();
  });
}
