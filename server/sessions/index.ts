export { mountSessions, type MountSessionsOptions } from './mount.ts';
export { LiveSessions, newRoomName, type BotCapacity, type ConnectRequest, type SessionGrant } from './live-sessions.ts';
export { SessionStore, SESSION_LEASE } from './session-store.ts';
export { SessionError, SESSION_ERROR_STATUS, type SessionErrorCode } from './session-errors.ts';
export { checkOrigin, originHostname } from './origin-allowlist.ts';
export { mintConnectToken, verifyConnectToken, CONNECT_AUTH_RULES } from './connect-auth.ts';
export { createSessionFaceOpener, sessionCanvas, SESSION_FACE_DEFAULTS, type SessionFaceOpener } from './agent-face.ts';
export { SESSION_API_LIMITS } from './session-routes.ts';
