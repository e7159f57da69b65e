import test from 'ava';
import { ProviderError, codeForHttpStatus, defaultRetryable } from '../../core/provider-error.ts';

test('ProviderError carries code, status and retryable, and is an Error with its cause', (t) => {
  const cause = new Error('socket hang up');
  const err = new ProviderError('connection_lost', 'the stream broke', { status: 1006, cause });
  t.true(err instanceof Error);
  t.like(err, { code: 'connection_lost', status: 1006, retryable: true, message: 'the stream broke', name: 'ProviderError' });
  t.is(err.cause, cause);
});

test('retryable defaults by code, and a plugin may decide otherwise', (t) => {
  for (const code of ['rate_limited', 'provider_error', 'connect_failed', 'connection_lost', 'timeout']) t.true(defaultRetryable(code), code);
  for (const code of ['auth_failed', 'bad_request', 'invalid_response', 'unknown_voice']) t.false(defaultRetryable(code), code);
  t.false(new ProviderError('timeout', 'x', { retryable: false }).retryable);
  t.true(new ProviderError('bad_request', 'x', { retryable: true }).retryable);
});

test('a subclass keeps its own name and is still a ProviderError', (t) => {
  class AcmeError extends ProviderError<'auth_failed' | 'quota'> {}
  const err = new AcmeError('quota', 'out of credits');
  t.true(err instanceof ProviderError);
  t.is(err.name, 'AcmeError');
  t.false(err.retryable);
});

test('HTTP statuses map to the shared codes', (t) => {
  t.deepEqual([401, 403, 429, 400, 404, 422, 500, 503].map(codeForHttpStatus), [
    'auth_failed',
    'auth_failed',
    'rate_limited',
    'bad_request',
    'bad_request',
    'bad_request',
    'provider_error',
    'provider_error',
  ]);
});
