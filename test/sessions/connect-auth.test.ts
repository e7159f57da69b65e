import test from 'ava';
import { CONNECT_AUTH_RULES, mintConnectToken, verifyConnectToken } from '../../server/sessions/connect-auth.ts';

const agent = '0b6e4c52-6b1e-4a3c-9d0a-5f7b2a9e1c11';
const secret = 'agent-auth-secret';
const now = Date.UTC(2026, 10, 23, 12, 0, 0);
const inSeconds = (s: number) => Math.floor(now / 1000) + s;

test('a token minted with the secret for this agent and user is accepted until it expires', (t) => {
  const token = mintConnectToken(secret, agent, { expiresAt: inSeconds(120), clientUserRef: 'user-7' });
  t.regex(token, /^v1\.\d+\.[0-9a-f]{64}$/);
  t.is(verifyConnectToken(secret, agent, token, 'user-7', now), null);
  t.is(verifyConnectToken(secret, agent, token, 'user-7', now + 119_000), null);
  t.regex(verifyConnectToken(secret, agent, token, 'user-7', now + (120 + CONNECT_AUTH_RULES.clockSkewSeconds + 1) * 1000) ?? '', /expired/);
});

test('a token is bound to its secret, agent and client_user_ref', (t) => {
  const token = mintConnectToken(secret, agent, { expiresAt: inSeconds(60), clientUserRef: 'user-7' });
  t.regex(verifyConnectToken('another-secret', agent, token, 'user-7', now) ?? '', /signature/);
  t.regex(verifyConnectToken(secret, '11111111-2222-4333-8444-555555555555', token, 'user-7', now) ?? '', /signature/);
  t.regex(verifyConnectToken(secret, agent, token, 'user-8', now) ?? '', /signature/);
  t.regex(verifyConnectToken(secret, agent, token, null, now) ?? '', /signature/);
  const anonymous = mintConnectToken(secret, agent, { expiresAt: inSeconds(60) });
  t.is(verifyConnectToken(secret, agent, anonymous, null, now), null);
});

test('missing, malformed, tampered and too-long-lived tokens are refused', (t) => {
  const good = mintConnectToken(secret, agent, { expiresAt: inSeconds(60) });
  const [v, exp, sig] = good.split('.');
  const tampered = [
    undefined, null, 42, '', 'v1', `v2.${exp}.${sig}`, `v1.${Number(exp) + 1}.${sig}`, `v1.${exp}.${sig!.slice(0, 63)}`,
    `v1.${exp}.${sig!.toUpperCase()}`, `${v}.${exp}.${sig}x`, `v1.-5.${sig}`, 'x'.repeat(10_000),
  ];
  for (const token of tampered) t.not(verifyConnectToken(secret, agent, token, null, now), null, String(token).slice(0, 40));
  const longLived = mintConnectToken(secret, agent, { expiresAt: inSeconds(CONNECT_AUTH_RULES.maxValiditySeconds + CONNECT_AUTH_RULES.clockSkewSeconds + 10) });
  t.regex(verifyConnectToken(secret, agent, longLived, null, now) ?? '', /validity/);
});

test('only the canonical form is accepted: an expiry with a leading zero is refused', (t) => {
  const good = mintConnectToken(secret, agent, { expiresAt: inSeconds(60) });
  const [, exp, sig] = good.split('.');
  t.is(verifyConnectToken(secret, agent, good, null, now), null);
  // The same expiry and a valid signature over it: one token per expiry, not several spellings.
  for (const spelling of [`0${exp}`, `00${exp}`]) t.regex(verifyConnectToken(secret, agent, `v1.${spelling}.${sig}`, null, now) ?? '', /not a valid connect token/, spelling);
});
