/**
 * A real TCP relay between a server and PostgreSQL (the technique of security-database.test.ts),
 * for the operations tests and for the fleet's hosts in network namespaces (which cannot reach the
 * machine's loopback, where PostgreSQL listens): `stop()` is an outage (connections cut, new ones refused), `pause()`
 * a stall (connections stay open, nothing gets through until `resume()`, then everything does).
 */
import net from 'node:net';

export class TcpRelay {
  private listener: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  private paused = false;
  private readonly waiting: (() => void)[] = [];
  port = 0;

  constructor(
    private readonly target: { host: string; port: number },
    /** Where the relay listens: loopback, or a test network's root link (test/support/netns.ts) so that its hosts reach it. */
    private readonly listenHost = '127.0.0.1',
  ) {}

  static to(databaseUrl: string, listenHost?: string): TcpRelay {
    const url = new URL(databaseUrl);
    return new TcpRelay({ host: url.hostname, port: Number(url.port || 5432) }, listenHost);
  }

  /** `databaseUrl` with its host replaced by this relay's address. */
  via(databaseUrl: string): string {
    const url = new URL(databaseUrl);
    url.host = `${this.listenHost}:${this.port}`;
    return url.toString();
  }

  async start(): Promise<void> {
    this.listener = net.createServer((client) => {
      const upstream = net.connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => undefined);
      }
      const forward = (from: net.Socket, to: net.Socket) =>
        from.on('data', (chunk: Buffer) => {
          if (this.paused) this.waiting.push(() => to.write(chunk));
          else to.write(chunk);
        });
      forward(client, upstream);
      forward(upstream, client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => this.listener!.listen(this.port, this.listenHost, resolve));
    this.port = (this.listener.address() as net.AddressInfo).port;
  }

  pause(): void {
    this.paused = true;
  }

  /** Chunks held by `pause()` so far (each query a paused server sends adds at least one). */
  get heldChunks(): number {
    return this.waiting.length;
  }

  resume(): void {
    this.paused = false;
    for (const send of this.waiting.splice(0)) send();
  }

  async stop(): Promise<void> {
    this.waiting.length = 0;
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.listener ? this.listener.close(() => resolve()) : resolve()));
    this.listener = undefined;
  }
}
