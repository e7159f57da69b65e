/**
 * sharp (libvips, a native binding) loaded on first use instead of at import: the transports,
 * agent and clients entry points hold code that decodes images (the STV client, the WebRTC media
 * conversions), but importing them must not load a native image library that a bot without
 * pictures never needs (docs/package.md, "Heavy parts loaded at import").
 */
import type Sharp from 'sharp';

let loading: Promise<typeof Sharp> | undefined;

/** The sharp module, imported once by the first caller. */
export function loadSharp(): Promise<typeof Sharp> {
  loading ??= import('sharp').then((m) => m.default);
  return loading;
}
