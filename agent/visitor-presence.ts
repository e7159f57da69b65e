/**
 * Who is in a bot's room, as the bot's session decides from it (bot-session.ts): the visitors and
 * their peer connection states (from the room's presence events), the peak number at once (the
 * call's `participant_count`), whether one was ever there and ever connected, and why the server
 * could not offer a media path when it said (`media_ports_exhausted`, `turn_unavailable`).
 */
import type { RoomSubscriberEvent } from '../transports/webrtc/room.ts';

export class VisitorPresence {
  private readonly visitors = new Map<string, RTCPeerConnectionState | 'none'>();
  /** Peak number of visitors in the room at once. */
  peak = 0;
  /** A visitor was present (in the room, its peer connection not failed) at least once. */
  hadVisitor = false;
  /** A visitor's peer connection was connected at least once. */
  everConnected = false;
  /** Why the server could not offer a visitor a media path (room.ts), when it said. */
  gatheringFailure: string | null = null;

  /** The visitors already there when the bot joined. */
  seed(visitors: readonly { readonly participantId: string; readonly peerState: RTCPeerConnectionState | 'none' }[]): void {
    for (const v of visitors) this.visitors.set(v.participantId, v.peerState);
    this.settle();
  }

  track(event: RoomSubscriberEvent): void {
    switch (event.type) {
      case 'joined':
        this.visitors.set(event.participantId, 'none');
        break;
      case 'peer-state':
        if (this.visitors.has(event.participantId)) this.visitors.set(event.participantId, event.state);
        if (event.state === 'failed' && event.reason) this.gatheringFailure = event.reason;
        break;
      case 'left':
        this.visitors.delete(event.participantId);
        break;
    }
    this.settle();
  }

  private settle(): void {
    this.peak = Math.max(this.peak, this.visitors.size);
    if (this.connected) this.everConnected = true;
    if (this.present > 0) this.hadVisitor = true;
  }

  /** Visitors who are there: in the room, and their peer connection has not failed. */
  get present(): number {
    let n = 0;
    for (const state of this.visitors.values()) if (state !== 'failed' && state !== 'closed') n++;
    return n;
  }

  /** A visitor's peer connection is connected now. */
  get connected(): boolean {
    for (const state of this.visitors.values()) if (state === 'connected') return true;
    return false;
  }

  /** Every visitor's media path failed before one ever connected: nothing will come of waiting. */
  get failedBeforeConnecting(): boolean {
    return !this.everConnected && this.visitors.size > 0 && [...this.visitors.values()].every((state) => state === 'failed');
  }
}
