import type { Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { ApiError } from './api-error.ts';
import { answerAndDestroy } from './raw-response.ts';

/**
 * What Node's HTTP parser refuses before Koa sees a request (it answers these with an empty body
 * by default), mapped to the REST error shape. `code` is Node's error code (`HPE_*` from llhttp).
 */
export function clientErrorFor(code: string | undefined): ApiError | null {
  switch (code) {
    case 'ECONNRESET':
    case 'EPIPE':
      return null; // the peer is gone: nothing to answer
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError('headers_too_large', 'request headers are larger than the server accepts (16 KiB)');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('request_timeout', 'the request did not arrive in time');
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new ApiError('bad_request', 'chunk extensions are too large');
    default:
      return new ApiError('bad_request', code?.startsWith('HPE_') ? `malformed HTTP request (${code.slice(4).toLowerCase()})` : 'malformed HTTP request');
  }
}

/**
 * Installs the `clientError` handler: a malformed request (bad request line, bad chunking,
 * oversized headers) or a request that timed out is answered in the error shape and its socket
 * destroyed. A socket whose response has already started is only destroyed (a second status
 * line would corrupt the stream).
 */
export function handleClientErrors(server: Server, logger: Logger): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const error = clientErrorFor(err.code);
    const started = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent;
    if (!error || started || !socket.writable) {
      socket.destroy();
      return;
    }
    logger.info({ code: err.code, status: error.status }, 'malformed request refused');
    answerAndDestroy(socket, error);
  });
}
