/**
 * Public surface of the Node clients of the hosted service's `/realtime` WebSocket: `SvcClient`
 * (a face model driven with your own audio) and `SvcSTVClient` (speech to video), the wire
 * protocol they speak, and credential resolution. Re-exports only; the code lives in
 * transports/realtime/. The browser widget and the Python client are separate (clients/web,
 * clients/python).
 */
export * from '../protocol/realtime.ts';
export * from '../transports/realtime/svc-client.ts';
export * from '../transports/realtime/stv-client.ts';
export * from '../transports/realtime/credentials.ts';
export * from '../transports/realtime/remote-face-session.ts';
