/**
 * RGB (3 bytes per pixel) to planar I420 (Y, then U and V at half width and height), BT.601
 * limited range with the integer coefficients libyuv uses, so a picture converted here matches
 * one converted by libwebrtc within one level. The face renderer's sessions that go to WebRTC
 * convert on the render worker thread: the event loop then receives a picture it can hand to
 * the video source as it is (no decode, no RGBA copy, 1.5 bytes per pixel instead of 3).
 *
 * Widths and heights must be even (the face models only make even sizes).
 */

export function i420Length(width: number, height: number): number {
  return width * height + 2 * ((width >> 1) * (height >> 1));
}

/** Converts `rgb` (width*height*3 bytes) into `out` (at least `i420Length` bytes; a new buffer when absent); returns the I420 view. */
export function rgbToI420(rgb: Uint8Array, width: number, height: number, out?: Uint8Array): Uint8Array {
  if ((width & 1) !== 0 || (height & 1) !== 0 || width <= 0 || height <= 0) throw new RangeError(`I420 needs even, positive sizes, got ${width}x${height}`);
  if (rgb.length < width * height * 3) throw new RangeError(`rgb image of ${width}x${height} needs ${width * height * 3} bytes, got ${rgb.length}`);
  const length = i420Length(width, height);
  if (out && out.length < length) throw new RangeError(`I420 target of ${out.length} bytes is smaller than ${length}`);
  const dst = out ? out.subarray(0, length) : new Uint8Array(length);
  const cw = width >> 1;
  const uBase = width * height;
  const vBase = uBase + cw * (height >> 1);
  const stride = width * 3;
  for (let y = 0; y < height; y += 2) {
    let p0 = y * stride;
    let p1 = p0 + stride;
    let y0 = y * width;
    let y1 = y0 + width;
    let u = uBase + (y >> 1) * cw;
    let v = vBase + (y >> 1) * cw;
    for (let x = 0; x < width; x += 2) {
      const r00 = rgb[p0]!, g00 = rgb[p0 + 1]!, b00 = rgb[p0 + 2]!;
      const r01 = rgb[p0 + 3]!, g01 = rgb[p0 + 4]!, b01 = rgb[p0 + 5]!;
      const r10 = rgb[p1]!, g10 = rgb[p1 + 1]!, b10 = rgb[p1 + 2]!;
      const r11 = rgb[p1 + 3]!, g11 = rgb[p1 + 4]!, b11 = rgb[p1 + 5]!;
      dst[y0++] = ((66 * r00 + 129 * g00 + 25 * b00 + 128) >> 8) + 16;
      dst[y0++] = ((66 * r01 + 129 * g01 + 25 * b01 + 128) >> 8) + 16;
      dst[y1++] = ((66 * r10 + 129 * g10 + 25 * b10 + 128) >> 8) + 16;
      dst[y1++] = ((66 * r11 + 129 * g11 + 25 * b11 + 128) >> 8) + 16;
      const r = (r00 + r01 + r10 + r11 + 2) >> 2;
      const g = (g00 + g01 + g10 + g11 + 2) >> 2;
      const b = (b00 + b01 + b10 + b11 + 2) >> 2;
      dst[u++] = ((112 * b - 74 * g - 38 * r + 128) >> 8) + 128;
      dst[v++] = ((112 * r - 94 * g - 18 * b + 128) >> 8) + 128;
      p0 += 6;
      p1 += 6;
    }
  }
  return dst;
}
