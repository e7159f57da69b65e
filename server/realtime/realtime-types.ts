/**
 * What the /realtime endpoint (realtime-endpoint.ts) and its connections (realtime-connection.ts)
 * take from the rest of the server: the principal an API key stands for, a resolved face
 * configuration, the resolver that finds both, the configuration error it throws, and the
 * publisher of a session's frames into a WebRTC room.
 */
import type { Observable } from 'rxjs';
import type { FaceFrame, FaceReference } from '../../processors/avatar/face-model.ts';
import type { RealtimeErrorCode, WebRTCSettings } from '../../protocol/realtime.ts';

export interface RealtimePrincipal {
  readonly organizationId: string;
  /** `api_key:<id>` */
  readonly principal: string;
  /** The key's id, when the key can be revoked (watched for revocation while the session lives). */
  readonly apiKeyId?: string;
}

export interface ResolvedFaceConfig {
  readonly configId: string;
  readonly modelVariantId: string;
  /** Registry slug of the face model (`human-portrait`, `human-presence`). */
  readonly faceSlug: string;
  readonly configuration: Record<string, unknown>;
  readonly referenceImage?: Uint8Array | FaceReference;
}

/**
 * A configuration the key can read but that cannot run (its reference image is missing, not an
 * image, shows no face; its variant is not served here). The resolver throws it; the endpoint
 * answers the code, logs the refusal and closes (docs/realtime-protocol.md, "Errors").
 */
export class RealtimeConfigError extends Error {
  constructor(
    readonly code: RealtimeErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'RealtimeConfigError';
  }
}


/** What the endpoint needs from the rest of the server (keys, configs, assets). */
export interface RealtimeResolver {
  authenticate(apiKey: string): Promise<RealtimePrincipal | null>;
  resolveConfig(principal: RealtimePrincipal, configId: string): Promise<ResolvedFaceConfig | null>;
  /**
   * Calls `onRevoked` once when the principal's key is revoked; returns the function that stops
   * watching. Without it sessions are not ended on revocation.
   */
  watchRevocation?(principal: RealtimePrincipal, onRevoked: () => void): () => void;
}

/** Publishes a face session's frames into a WebRTC room (the Direct WebRTC option). */
export type AvatarPublisher = (
  frames: Observable<FaceFrame>,
  settings: WebRTCSettings,
  /** The operator's SSRF exceptions for client-given LiveKit urls (SVC_LIVEKIT_ALLOWED_RANGES). */
  extra?: { readonly livekitAllowedRanges?: readonly string[]; readonly videoSize?: { readonly width: number; readonly height: number } },
) => Promise<{
  readonly participantId: string;
  readonly room: string;
  /** Settles when publishing ended on its own (the room closed, the connection to it was lost) or after `close()`. */
  readonly ended?: Promise<void>;
  close(): void | Promise<void>;
}>;
