/**
 * What the bot runner needs from a session's room, whichever provider made it: the visitor's
 * microphone as an input transport (the head of the pipeline), the client's messages, presence
 * (visitors joining, reaching the bot, leaving), publishing the avatar (whose publication also
 * sends the session messages), and whether the room was closed under the bot.
 *
 * - embedded: an adapter over the room in this process's registry (`RoomAudioInput`,
 *   `Room.clientMessages` / `subscriberEvents`, `publishAvatar` with the embedded settings). The
 *   bot holds no connection of its own: leaving is nothing, the room is the server's.
 * - livekit: a `LiveKitBotRoom`, the bot's one rtc-node connection to the LiveKit room
 *   (`LiveKitAudioInput`, data packets on the `session` topic); leaving disconnects it.
 *
 * No server/ imports: this is the agent layer.
 */
import type { Observable } from 'rxjs';
import type { FaceFrame } from '../processors/avatar/face-model.ts';
import type { FramePumpOptions } from '../transports/webrtc/avatar-frame-pump.ts';
import type { PublishedAvatar } from '../transports/webrtc/embedded-publisher.ts';
import { publishAvatar } from '../transports/webrtc/publish-avatar.ts';
import { RoomAudioInput } from '../transports/webrtc/room-audio-input.ts';
import type { RoomClientMessage, RoomSubscriberEvent, RoomSubscriberInfo } from '../transports/webrtc/room.ts';
import type { AvatarRoom } from '../transports/webrtc/room-provider.ts';
import type { RoomRegistry } from '../transports/webrtc/room-registry.ts';

/** How the bot publishes its face: the frame pump's settings, and the pictures' size when known (one negotiation for both tracks in a LiveKit room). */
export interface BotPublishOptions extends FramePumpOptions {
  readonly videoSize?: { readonly width: number; readonly height: number };
}

export interface BotRoom {
  readonly provider: 'embedded' | 'livekit';
  readonly name: string;
  /** A new input transport on the visitor's microphone (put first in the pipeline). */
  createAudioInput(): RoomAudioInput;
  /** Messages clients sent to the bot (hot). */
  readonly clientMessages: Observable<RoomClientMessage>;
  /** Visitors joining, reaching the bot (`peer-state`), leaving (hot). */
  readonly presence: Observable<RoomSubscriberEvent>;
  /** Visitors there now (take this, then follow `presence`). */
  visitors(): RoomSubscriberInfo[];
  /** Publishes the avatar; the publication's `sendMessage` carries the session messages. */
  publishAvatar(frames: Observable<FaceFrame>, options?: BotPublishOptions): Promise<PublishedAvatar>;
  /** The room was closed under the bot (the server released it, or the provider deleted it). */
  readonly closed: boolean;
  /** The bot leaves the room (after unpublishing); idempotent. */
  leave(): Promise<void>;
}

export interface BotRoomContext {
  /** The embedded provider's registry (where embedded sessions' rooms live). */
  readonly rooms?: RoomRegistry;
  /** Private ranges the LiveKit url may resolve to (SVC_LIVEKIT_ALLOWED_RANGES). */
  readonly livekitAllowedRanges?: readonly string[];
}

/** Opens the bot's side of a session's room; rejects with a clear error when it cannot. */
export async function openBotRoom(room: AvatarRoom, context: BotRoomContext): Promise<BotRoom> {
  const settings = room.publisherSettings;
  if (room.provider === 'embedded' && settings.provider === 'embedded') {
    const rooms = context.rooms;
    if (!rooms) throw new Error('this bot runner has no embedded room registry');
    const embedded = rooms.get(settings.room);
    if (!embedded || embedded.closed) throw new Error(`room ${settings.room} is not open`);
    return {
      provider: 'embedded',
      name: embedded.name,
      createAudioInput: () => new RoomAudioInput(embedded, { name: 'RoomAudioInput' }),
      clientMessages: embedded.clientMessages,
      presence: embedded.subscriberEvents,
      visitors: () => embedded.subscribers(),
      publishAvatar: (frames, options = {}) => publishAvatar(frames, settings, { rooms, ...options }),
      get closed() {
        return embedded.closed;
      },
      leave: async () => undefined,
    };
  }
  if (room.provider === 'livekit' && settings.provider === 'livekit') {
    // Loaded on demand: the LiveKit FFI library starts native threads when imported.
    const { LiveKitBotRoom } = await import('../transports/livekit/livekit-bot-room.ts');
    const { LiveKitAudioInput } = await import('../transports/livekit/livekit-audio-input.ts');
    const bot = await LiveKitBotRoom.join({
      url: settings.url,
      token: settings.token,
      ...(context.livekitAllowedRanges ? { livekitAllowedRanges: context.livekitAllowedRanges } : {}),
    });
    return {
      provider: 'livekit',
      name: bot.name || room.room,
      createAudioInput: () => new LiveKitAudioInput(bot),
      clientMessages: bot.clientMessages,
      presence: bot.subscriberEvents,
      visitors: () => bot.subscribers(),
      publishAvatar: (frames, options = {}) => bot.publishAvatar(frames, options),
      get closed() {
        return bot.closed;
      },
      leave: () => bot.close(),
    };
  }
  throw new Error(`the room's provider (${room.provider}) and its publisher settings (${settings.provider}) disagree`);
}
