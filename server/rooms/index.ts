/** Embedded WebRTC rooms on the HTTP server: the signalling WebSocket and the browser client script. */
export {
  attachRoomSignalling,
  createRoomSignallingHandler,
  ROOM_SIGNALLING_DEFAULTS,
  type AttachedRoomSignalling,
  type RoomSignalling,
  type RoomSignallingHandler,
  type RoomSignallingOptions,
  type SignallingDelegate,
  type UpgradeRequest,
} from './room-signalling.ts';
export { roomClientScript, serveRoomClient, ROOM_CLIENT_PATH } from './room-client-script.ts';
export { mountRooms, type MountedRooms, type MountRoomsOptions } from './mount.ts';
