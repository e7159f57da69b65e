/**
 * `svc-avatar/livekit-agents`: our face as the avatar of a LiveKit Agents (Node) agent, started
 * in two lines beside its `AgentSession`, as the hosted vendors' avatar plugins are:
 *
 * ```ts
 * const avatar = new AvatarSession({ apiUrl: 'https://svc.example.com', apiKey, configId: 'svc/human-portrait' });
 * await avatar.start(session, ctx.room);   // before session.start(...)
 * ```
 *
 * `start` mints a LiveKit token for the avatar (its identity, the agent's room, attribute
 * `lk.publish_on_behalf` = the agent, kind `agent`) with the agent's LiveKit credentials, asks
 * our service for an avatar session (`POST /v1/avatar-sessions`), and routes the agent's speech
 * to the avatar (`DataStreamAudioOutput`: `lk.audio_stream` byte streams, `lk.clear_buffer`,
 * `lk.playback_started` / `lk.playback_finished`). The avatar publishes the face and the voice on
 * behalf of the agent. `aclose()` ends the session (`DELETE`); the session also ends when the
 * agent leaves the room. docs/livekit-agents.md.
 *
 * Needs `@livekit/agents` (1.9 or newer) and `@livekit/rtc-node`, the agent's own dependencies.
 */
import { AvatarSession as AgentsAvatarSession, DataStreamAudioOutput, type voice } from '@livekit/agents';
import { TrackKind, type Room } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';

export const SVC_AVATAR_DEFAULTS = {
  configId: 'svc/human-portrait',
  avatarIdentity: 'svc-avatar',
  /** The avatar's token only has to be valid when the avatar joins (a minute from now); 10 minutes of slack. */
  tokenTtlS: 600,
} as const;

export interface SvcAvatarSessionOptions {
  /** Our service's base URL (default `SVC_API_URL`). */
  readonly apiUrl?: string;
  /** An API key of our service (default `SVC_API_KEY`). */
  readonly apiKey?: string;
  /** The face: a model configuration id or template alias (default `svc/human-portrait`). */
  readonly configId?: string;
  readonly avatarIdentity?: string;
  readonly avatarName?: string;
  /** End the avatar after this many seconds at the latest (the server's ceiling applies). */
  readonly maxDurationS?: number;
  readonly tokenTtlS?: number;
  /** `fetch` to reach our service (tests, proxies). */
  readonly fetch?: typeof fetch;
  /** How long a request to our service may take before it is given up (ms, default 30 000: a start includes the avatar's join). */
  readonly requestTimeoutMs?: number;
}

export interface SvcAvatarStartOptions {
  /** The LiveKit server the room is on, as our service should reach it (default `LIVEKIT_URL`). */
  readonly livekitUrl?: string;
  /** Credentials to mint the avatar's token (default `LIVEKIT_API_KEY` / `LIVEKIT_API_SECRET`). */
  readonly livekitApiKey?: string;
  readonly livekitApiSecret?: string;
}

/** An error answer of our service (`code` as in docs/decisions-rest.md), or a failure to reach it. */
export class SvcAvatarError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status: number | null,
  ) {
    super(message);
    this.name = 'SvcAvatarError';
  }
}

export class AvatarSession extends AgentsAvatarSession {
  private readonly settings: Required<Pick<SvcAvatarSessionOptions, 'configId' | 'avatarIdentity' | 'tokenTtlS'>> & SvcAvatarSessionOptions;
  private sessionId: string | null = null;
  private session: Record<string, unknown> | null = null;

  constructor(options: SvcAvatarSessionOptions = {}) {
    super();
    this.settings = {
      ...options,
      configId: options.configId ?? SVC_AVATAR_DEFAULTS.configId,
      avatarIdentity: options.avatarIdentity ?? SVC_AVATAR_DEFAULTS.avatarIdentity,
      tokenTtlS: options.tokenTtlS ?? SVC_AVATAR_DEFAULTS.tokenTtlS,
    };
  }

  override get avatarIdentity(): string {
    return this.settings.avatarIdentity;
  }

  override get provider(): string {
    return 'svc';
  }

  /** Our service's view of the session (`POST /v1/avatar-sessions`'s answer), once started. */
  get avatarSession(): Readonly<Record<string, unknown>> | null {
    return this.session;
  }

  /**
   * Starts the avatar in `room` (connected, or within an agent job) and makes it the agent's
   * audio output. Call it before `agentSession.start()`. Rejects with `SvcAvatarError`.
   */
  override async start(agentSession: voice.AgentSession, room: Room, options: SvcAvatarStartOptions = {}): Promise<Record<string, unknown>> {
    await super.start(agentSession, room);
    const apiUrl = (this.settings.apiUrl ?? process.env.SVC_API_URL ?? '').replace(/\/+$/, '');
    const apiKey = this.settings.apiKey ?? process.env.SVC_API_KEY;
    const livekitUrl = options.livekitUrl ?? process.env.LIVEKIT_URL;
    const livekitApiKey = options.livekitApiKey ?? process.env.LIVEKIT_API_KEY;
    const livekitApiSecret = options.livekitApiSecret ?? process.env.LIVEKIT_API_SECRET;
    if (!apiUrl || !apiKey) throw new SvcAvatarError('missing_settings', 'apiUrl and apiKey are needed (or SVC_API_URL and SVC_API_KEY)', null);
    if (!livekitUrl || !livekitApiKey || !livekitApiSecret) throw new SvcAvatarError('missing_settings', 'livekitUrl, livekitApiKey and livekitApiSecret are needed (or LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET)', null);
    const agentIdentity = room.localParticipant?.identity;
    if (!room.isConnected || !room.name || !agentIdentity) throw new SvcAvatarError('room_not_connected', 'connect the room before starting the avatar (ctx.connect() in an agent job)', null);

    const token = new AccessToken(livekitApiKey, livekitApiSecret, {
      identity: this.settings.avatarIdentity,
      name: this.settings.avatarName ?? this.settings.avatarIdentity,
      ttl: this.settings.tokenTtlS,
      // The agent's clients (RoomIO, the playground) take the avatar's tracks for the agent's.
      attributes: { 'lk.publish_on_behalf': agentIdentity },
    });
    token.kind = 'agent';
    token.addGrant({ roomJoin: true, room: room.name, canPublish: true, canSubscribe: true, canPublishData: true });

    const body = {
      config_id: this.settings.configId,
      livekit_url: livekitUrl,
      livekit_token: await token.toJwt(),
      ...(this.settings.maxDurationS !== undefined ? { max_duration_s: this.settings.maxDurationS } : {}),
    };
    const answer = await this.call('POST', `${apiUrl}/v1/avatar-sessions`, apiKey, body);
    this.session = answer;
    this.sessionId = String(answer['avatar_session_id']);

    // The agent's speech goes to the avatar; playback is reported back by it (waitPlaybackStart),
    // so the agent's transcript follows what was heard.
    agentSession.output.audio = new DataStreamAudioOutput({
      room,
      destinationIdentity: this.settings.avatarIdentity,
      waitRemoteTrack: TrackKind.KIND_VIDEO,
      waitPlaybackStart: true,
    });
    return answer;
  }

  /** Ends the avatar session (the avatar leaves the room). Idempotent. */
  override async aclose(): Promise<void> {
    const id = this.sessionId;
    this.sessionId = null;
    const apiUrl = (this.settings.apiUrl ?? process.env.SVC_API_URL ?? '').replace(/\/+$/, '');
    const apiKey = this.settings.apiKey ?? process.env.SVC_API_KEY;
    try {
      if (id && apiUrl && apiKey) this.session = await this.call('DELETE', `${apiUrl}/v1/avatar-sessions/${encodeURIComponent(id)}`, apiKey);
    } catch (error) {
      // Ended and forgotten by the service already (it keeps an ended session's record 10
      // minutes): closed, which is what was asked. Other failures are the caller's to see.
      if (!(error instanceof SvcAvatarError && error.status === 404)) throw error;
    } finally {
      await super.aclose();
    }
  }

  private async call(method: 'POST' | 'DELETE', url: string, apiKey: string, body?: unknown): Promise<Record<string, unknown>> {
    const doFetch = this.settings.fetch ?? fetch;
    let res: Response;
    try {
      res = await doFetch(url, {
        method,
        headers: { 'X-API-Key': apiKey, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(this.settings.requestTimeoutMs ?? 30_000),
      });
    } catch (error) {
      throw new SvcAvatarError('unreachable', `svc avatar service unreachable at ${url}: ${error instanceof Error ? error.message : String(error)}`, null);
    }
    const text = await res.text();
    let json: Record<string, unknown> = {};
    try {
      json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      // an answer that is not JSON (a proxy's page): reported below with the status
    }
    if (!res.ok) throw new SvcAvatarError(typeof json['code'] === 'string' ? json['code'] : `http_${res.status}`, typeof json['message'] === 'string' ? json['message'] : `${method} ${url}: HTTP ${res.status}`, res.status);
    return json;
  }
}
