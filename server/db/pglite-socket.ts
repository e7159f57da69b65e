import { chmodSync, existsSync, lstatSync, mkdirSync, unlinkSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import type { Knex } from 'knex';

/**
 * The embedded database served to other processes of the same OS user (the CLI, `npm run worker`,
 * psql) over the PostgreSQL wire protocol on a Unix socket, so that they need not stop the server
 * that holds the PGlite directory (docs/operations.md, "The CLI and the embedded database").
 *
 * PGlite is one single-user session. Each client's work runs in that session a transaction at a
 * time: a client takes the session with its first message and gives it back when PGlite says the
 * session is idle again (ReadyForQuery `I`, no extended-protocol sequence half sent). Meanwhile
 * other clients, and the server's own queries (the session is taken through the server's knex
 * pool of one), wait. Session settings do not outlive a transaction (`RESET ALL` on each return).
 */
export const PGLITE_SOCKET_RULES = {
  /** libpq and node-postgres find a socket in a directory by this name (`host=<dir>`). */
  fileName: '.s.PGSQL.5432',
  port: 5432,
  /** A client holding the session (an open transaction) silent this long is disconnected, its transaction rolled back. */
  idleInTransactionMs: 10_000,
  /** Longest startup packet accepted (user, database, options): a guard against garbage. */
  maxStartupBytes: 10_000,
  /** Longest message accepted (a client's bulk insert fits; a runaway length does not). */
  maxMessageBytes: 64 * 1024 * 1024,
} as const;

/** Where a server sharing `pgliteDir` listens: a private folder (0700) inside the database folder. */
export function pgliteSocketDir(pgliteDir: string): string {
  return join(pgliteDir, 'run');
}

export function pgliteSocketPath(pgliteDir: string): string {
  return join(pgliteSocketDir(pgliteDir), PGLITE_SOCKET_RULES.fileName);
}

/** Unix socket paths are limited (108 bytes on Linux with the terminating NUL). */
const MAX_SOCKET_PATH = 107;

export interface PgliteSocketServer {
  readonly path: string;
  /** Disconnects every client (rolling back what each held open) and removes the socket. */
  close(): Promise<void>;
}

interface Logger {
  warn(obj: object, msg: string): void;
}

export interface PgliteSocketOptions {
  logger?: Logger;
  /** Default `PGLITE_SOCKET_RULES.idleInTransactionMs`. */
  idleInTransactionMs?: number;
}

/**
 * Serves `db` (a knex on PGlite, opened by `openDatabase`, lock held) on `pgliteSocketPath`.
 * Only the caller may do so: it holds the directory lock, so a socket file already there is a
 * dead server's and is replaced.
 */
export async function servePgliteSocket(db: Knex, pgliteDir: string, options: PgliteSocketOptions = {}): Promise<PgliteSocketServer> {
  const { logger, idleInTransactionMs = PGLITE_SOCKET_RULES.idleInTransactionMs } = options;
  const dir = pgliteSocketDir(pgliteDir);
  const path = pgliteSocketPath(pgliteDir);
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH) {
    throw new Error(`the socket path ${path} is longer than ${MAX_SOCKET_PATH} bytes (a Unix socket limit): use a shorter SVC_DATA_DIR`);
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (lstatSync(dir).isSymbolicLink()) throw new Error(`${dir} is a symbolic link; refusing to serve the database there`);
  chmodSync(dir, 0o700); // made by an older run or another umask: only this OS user may enter
  if (existsSync(path)) unlinkSync(path);

  const version = await db.raw("select current_setting('server_version') as v");
  const parameters = { ...PARAMETERS, server_version: String((version as { rows: { v: string }[] }).rows[0]!.v) };
  const session = new SharedSession(db);
  const clients = new Set<ClientConnection>();
  const server: Server = createServer((socket) => {
    const client = new ClientConnection(socket, session, parameters, idleInTransactionMs, logger);
    clients.add(client);
    socket.once('close', () => clients.delete(client));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
  chmodSync(path, 0o600);
  let closing: Promise<void> | null = null;
  return {
    path,
    close() {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await Promise.all([...clients].map((c) => c.end('the server is shutting down')));
        session.closed = true;
        await stopped;
        try {
          unlinkSync(path);
        } catch {
          // removed by server.close already
        }
      })();
      return closing;
    },
  };
}

/** The one PGlite session, lent to one client at a time through the server's knex pool of one. */
class SharedSession {
  /** Set when the socket closes: the pool may be destroyed right after, nothing more is lent. */
  closed = false;

  constructor(private readonly db: Knex) {}

  async take(): Promise<PGlite> {
    return (await this.db.client.acquireConnection()) as PGlite;
  }

  give(pglite: PGlite): void {
    this.db.client.releaseConnection(pglite);
  }
}

/** One client of the socket: startup, then messages run in the shared session. */
class ClientConnection {
  private buffer: Buffer = Buffer.alloc(0);
  private started = false;
  private held: PGlite | null = null;
  /** The last ReadyForQuery status PGlite sent: I idle, T in a transaction, E failed transaction. */
  private status: 'I' | 'T' | 'E' = 'I';
  /** An extended-protocol sequence (Parse, Bind, ...) is under way: its Sync has not come yet. */
  private midSequence = false;
  private work: Promise<void> = Promise.resolve();
  private idleTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly socket: Socket,
    private readonly session: SharedSession,
    private readonly parameters: Record<string, string>,
    private readonly idleInTransactionMs: number,
    private readonly logger?: Logger,
  ) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
      this.schedule(() => this.drain());
    });
    socket.on('error', () => undefined); // a client gone mid-write: 'close' follows
    socket.on('close', () => this.schedule(() => this.finish()));
  }

  /** Ends the connection with a FATAL error message, rolling back what it held. */
  end(reason: string, sqlstate = '57P01'): Promise<void> {
    this.schedule(async () => {
      if (this.closed) return;
      this.write(errorResponse('FATAL', sqlstate, reason));
      await this.finish();
    });
    return this.work;
  }

  private schedule(step: () => Promise<void>): void {
    this.work = this.work.then(step).catch((err: unknown) => {
      this.logger?.warn({ err }, 'embedded database socket: a client connection failed');
      this.finish().catch(() => undefined);
    });
  }

  private async drain(): Promise<void> {
    if (this.closed) return;
    if (!this.started) {
      if (!this.startup()) return;
    }
    const batch = this.takeMessages();
    if (batch === null) return;
    if (batch.messages.length === 0) {
      if (batch.terminate) await this.finish();
      return;
    }
    this.clearIdleTimer();
    if (!this.held) this.held = await this.session.take();
    if (this.closed) return this.finish();
    const pglite = this.held;
    const output = await pglite.runExclusive(() => pglite.execProtocolRaw(batch.bytes));
    this.status = lastReadyStatus(output) ?? this.status;
    this.midSequence = !SEQUENCE_ENDS.has(batch.messages[batch.messages.length - 1]!);
    this.write(output);
    if (batch.terminate) return this.finish();
    if (this.status === 'I' && !this.midSequence) {
      await pglite.runExclusive(() => pglite.execProtocolRaw(simpleQuery('RESET ALL')));
      this.release();
    } else {
      const ms = this.idleInTransactionMs;
      this.idleTimer = setTimeout(() => void this.end(`idle in transaction for ${ms} ms, holding the embedded database (one session, shared): the transaction was rolled back`, '25P03'), ms);
      this.idleTimer.unref();
    }
  }

  /** Handles SSL/GSS requests (refused: the socket is local), cancel requests and the startup packet. */
  private startup(): boolean {
    while (!this.started) {
      if (this.buffer.length < 8) return false;
      const length = this.buffer.readInt32BE(0);
      if (length < 8 || length > PGLITE_SOCKET_RULES.maxStartupBytes) return this.refuse('08P01', 'invalid startup packet');
      if (this.buffer.length < length) return false;
      const code = this.buffer.readInt32BE(4);
      this.buffer = this.buffer.subarray(length);
      if (code === 80877103 || code === 80877104) {
        this.write(Buffer.from('N')); // SSLRequest, GSSENCRequest: not on a local socket
        continue;
      }
      if (code === 80877102) return this.refuse(null, ''); // CancelRequest: not supported, close
      if (code >> 16 !== 3) return this.refuse('0A000', `unsupported frontend protocol ${code >> 16}.${code & 0xffff}: 3.0 is served`);
      this.started = true;
      this.write(
        Buffer.concat([
          message('R', int32(0)), // AuthenticationOk: the socket's file mode is the authentication
          ...Object.entries(this.parameters).map(([k, v]) => message('S', Buffer.concat([cstring(k), cstring(v)]))),
          message('K', Buffer.concat([int32(process.pid), int32((Math.random() * 0x7fffffff) | 0)])),
          message('Z', Buffer.from('I')),
        ]),
      );
    }
    return true;
  }

  /** The complete messages in the buffer, as one batch for PGlite. */
  private takeMessages(): { bytes: Buffer; messages: string[]; terminate: boolean } | null {
    const messages: string[] = [];
    let offset = 0;
    let terminate = false;
    while (this.buffer.length - offset >= 5) {
      const type = String.fromCharCode(this.buffer[offset]!);
      const length = this.buffer.readInt32BE(offset + 1);
      if (length < 4 || length > PGLITE_SOCKET_RULES.maxMessageBytes) {
        this.refuse('08P01', `invalid message length ${length}`);
        return null;
      }
      if (this.buffer.length - offset < 1 + length) break;
      if (type === 'X') {
        terminate = true;
        break;
      }
      messages.push(type);
      offset += 1 + length;
    }
    const bytes = this.buffer.subarray(0, offset);
    this.buffer = this.buffer.subarray(offset);
    return { bytes: Buffer.from(bytes), messages, terminate };
  }

  private refuse(sqlstate: string | null, text: string): false {
    if (sqlstate) this.write(errorResponse('FATAL', sqlstate, text));
    this.closed = true;
    this.socket.end();
    return false;
  }

  /** Gives the session back clean (no open transaction, no settings, no prepared statements) and closes. */
  private async finish(): Promise<void> {
    this.clearIdleTimer();
    this.closed = true;
    const pglite = this.held;
    if (pglite) {
      this.held = null;
      try {
        await pglite.runExclusive(async () => {
          if (this.midSequence) await pglite.execProtocolRaw(message('S', Buffer.alloc(0)));
          await pglite.execProtocolRaw(simpleQuery('ROLLBACK'));
          await pglite.execProtocolRaw(simpleQuery('DISCARD ALL'));
        });
      } finally {
        this.session.give(pglite);
      }
    } else if (this.started && !this.session.closed) {
      // Named prepared statements and cursors outlive transactions: drop this client's.
      const clean = await this.session.take();
      try {
        await clean.runExclusive(() => clean.execProtocolRaw(simpleQuery('DISCARD ALL')));
      } finally {
        this.session.give(clean);
      }
      this.started = false;
    }
    if (!this.socket.destroyed) this.socket.end();
  }

  private release(): void {
    const pglite = this.held;
    this.held = null;
    if (pglite) this.session.give(pglite);
  }

  private clearIdleTimer(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  private write(bytes: Uint8Array): void {
    if (bytes.length && !this.socket.destroyed && this.socket.writable) this.socket.write(bytes);
  }
}

/** After these, PGlite has answered with ReadyForQuery (a simple query, or the Sync ending a sequence). */
const SEQUENCE_ENDS = new Set(['Q', 'S']);

/** What a PostgreSQL server tells a client right after authentication (PGlite speaks UTF-8, ISO dates). */
const PARAMETERS: Record<string, string> = {
  server_encoding: 'UTF8',
  client_encoding: 'UTF8',
  DateStyle: 'ISO, MDY',
  integer_datetimes: 'on',
  standard_conforming_strings: 'on',
  application_name: '',
};

function lastReadyStatus(output: Uint8Array): 'I' | 'T' | 'E' | null {
  let status: 'I' | 'T' | 'E' | null = null;
  const view = Buffer.from(output.buffer, output.byteOffset, output.byteLength);
  for (let offset = 0; offset + 5 <= view.length; offset += 1 + view.readInt32BE(offset + 1)) {
    if (view[offset] === 0x5a && offset + 6 <= view.length) status = String.fromCharCode(view[offset + 5]!) as 'I' | 'T' | 'E';
  }
  return status;
}

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}

function cstring(s: string): Buffer {
  return Buffer.concat([Buffer.from(s, 'utf8'), Buffer.alloc(1)]);
}

function message(type: string, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from(type), int32(body.length + 4), body]);
}

function simpleQuery(sql: string): Buffer {
  return message('Q', cstring(sql));
}

function errorResponse(severity: string, sqlstate: string, text: string): Buffer {
  return message('E', Buffer.concat([Buffer.from('S'), cstring(severity), Buffer.from('V'), cstring(severity), Buffer.from('C'), cstring(sqlstate), Buffer.from('M'), cstring(text), Buffer.alloc(1)]));
}
