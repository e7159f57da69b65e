/**
 * The single entry point for the Direct WebRTC option: publish a face session's frames into a
 * room of the embedded provider or of LiveKit, chosen by the settings' `provider`. The
 * /realtime endpoint wires its `webrtc` message to `createAvatarPublisher(...)`.
 */
import type { Observable } from 'rxjs';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import type { FramePumpOptions } from './avatar-frame-pump.ts';
import { publishToEmbeddedRoom, type PublishedAvatar } from './embedded-publisher.ts';
import { RoomError } from './room-errors.ts';
import type { RoomRegistry } from './room-registry.ts';

export type AvatarRoomSettings =
  | { readonly provider: 'embedded'; readonly room: string; readonly token: string }
  | { readonly provider: 'livekit'; readonly url: string; readonly token: string };

export interface PublishAvatarContext extends FramePumpOptions {
  /** The embedded room provider of this server; without it `embedded` settings are refused. */
  readonly rooms?: RoomRegistry;
  /** Private ranges a LiveKit url may resolve to despite the SSRF policy (SVC_LIVEKIT_ALLOWED_RANGES; none by default). */
  readonly livekitAllowedRanges?: readonly string[];
  /** The pictures' size when known in advance: a LiveKit room gets both tracks in one negotiation (`PublishFramesOptions.videoSize`). */
  readonly videoSize?: { readonly width: number; readonly height: number };
}

function requireString(value: unknown, field: string): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 4096) throw new RoomError('invalid_settings', `webrtc settings need a non-empty \`${field}\` string`);
  return value;
}

/** Checks settings that came from a client; throws `RoomError('invalid_settings')`. */
export function parseAvatarRoomSettings(value: unknown): AvatarRoomSettings {
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new RoomError('invalid_settings', 'webrtc settings must be an object');
  const s = value as Record<string, unknown>;
  if (s.provider === 'embedded') return { provider: 'embedded', room: requireString(s.room, 'room'), token: requireString(s.token, 'token') };
  if (s.provider === 'livekit') return { provider: 'livekit', url: requireString(s.url, 'url'), token: requireString(s.token, 'token') };
  throw new RoomError('invalid_settings', 'webrtc `provider` must be `embedded` or `livekit`');
}

/**
 * Publishes `frames` into the room. Resolves once the avatar is in the room (its participant id
 * and room name), rejects with a `RoomError` when the room refuses it. Publishing ends when
 * `frames` completes, the room closes, or `close()` is called.
 */
export async function publishAvatar(frames: Observable<FaceFrame>, settings: AvatarRoomSettings, context: PublishAvatarContext = {}): Promise<PublishedAvatar> {
  const checked = parseAvatarRoomSettings(settings);
  if (checked.provider === 'embedded') {
    if (!context.rooms) throw new RoomError('publish_failed', 'this server has no embedded room provider');
    return publishToEmbeddedRoom(frames, { ...context, rooms: context.rooms, room: checked.room, token: checked.token });
  }
  // Loaded on demand: the LiveKit FFI library starts native threads when imported.
  const { publishToLiveKit } = await import('../livekit/livekit-publisher.ts');
  return publishToLiveKit(frames, { ...context, url: checked.url, token: checked.token });
}

/** `publishAvatar` bound to a server's context, in the shape the /realtime endpoint takes. */
export function createAvatarPublisher(
  context: PublishAvatarContext,
): (frames: Observable<FaceFrame>, settings: AvatarRoomSettings, extra?: Pick<PublishAvatarContext, 'livekitAllowedRanges' | 'videoSize'>) => Promise<PublishedAvatar> {
  return (frames, settings, extra) => publishAvatar(frames, settings, extra ? { ...context, ...extra } : context);
}
