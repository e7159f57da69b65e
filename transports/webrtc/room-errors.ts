/** Errors of the embedded rooms outside the signalling socket (publishing, tokens, lookups). */

export type RoomErrorCode = 'auth_failed' | 'already_publishing' | 'room_closed' | 'invalid_settings' | 'publish_failed' | 'room_creation_failed';

export class RoomError extends Error {
  constructor(
    readonly code: RoomErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'RoomError';
  }
}
