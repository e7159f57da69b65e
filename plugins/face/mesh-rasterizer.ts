/**
 * Software triangle warp: each destination triangle is filled by mapping its pixels back into
 * the source texture with the triangle's affine map and sampling bilinearly. Scanline spans
 * with incremental texture coordinates keep it to a few adds per pixel.
 */

/**
 * Warps triangle (s0,s1,s2) of `src` onto (d0,d1,d2) of `dst`. Both are RGB images of
 * `width` x `height`. Pixels whose centre lies inside the destination triangle are written.
 */
export function warpTriangle(
  src: Uint8Array, dst: Uint8Array, width: number, height: number,
  sx0: number, sy0: number, sx1: number, sy1: number, sx2: number, sy2: number,
  dx0: number, dy0: number, dx1: number, dy1: number, dx2: number, dy2: number,
): void {
  const det = (dx1 - dx0) * (dy2 - dy0) - (dx2 - dx0) * (dy1 - dy0);
  if (Math.abs(det) < 1e-6) return;
  // Affine map destination -> source: s = A * (d - d0) + s0.
  const inv = 1 / det;
  const e1x = dx1 - dx0, e1y = dy1 - dy0, e2x = dx2 - dx0, e2y = dy2 - dy0;
  const f1x = sx1 - sx0, f1y = sy1 - sy0, f2x = sx2 - sx0, f2y = sy2 - sy0;
  // Barycentric (u, v) of d: u = ( e2y*(x-dx0) - e2x*(y-dy0)) * inv; v = (-e1y*(x-dx0) + e1x*(y-dy0)) * inv.
  const ax = (f1x * e2y - f2x * e1y) * inv; // d(sx)/dx
  const bx = (-f1x * e2x + f2x * e1x) * inv; // d(sx)/dy
  const ay = (f1y * e2y - f2y * e1y) * inv; // d(sy)/dx
  const by = (-f1y * e2x + f2y * e1x) * inv; // d(sy)/dy

  const minY = Math.max(0, Math.ceil(Math.min(dy0, dy1, dy2) - 0.5));
  const maxY = Math.min(height - 1, Math.floor(Math.max(dy0, dy1, dy2) - 0.5));
  // Texture coordinates in 16.16 fixed point, clamped so the 2x2 bilinear tap stays inside.
  const maxU = (width - 2) * 65536, maxV = (height - 2) * 65536;
  const stepU = Math.round(ax * 65536), stepV = Math.round(ay * 65536);
  const stride = width * 3;
  for (let y = minY; y <= maxY; y++) {
    const yc = y + 0.5;
    let xl = Infinity, xr = -Infinity, x = 0;
    // Intersect the row with each of the three edges (half-open in y so shared vertices count once).
    if ((dy0 <= yc && dy1 > yc) || (dy1 <= yc && dy0 > yc)) {
      x = dx0 + ((yc - dy0) / (dy1 - dy0)) * (dx1 - dx0);
      if (x < xl) xl = x;
      if (x > xr) xr = x;
    }
    if ((dy1 <= yc && dy2 > yc) || (dy2 <= yc && dy1 > yc)) {
      x = dx1 + ((yc - dy1) / (dy2 - dy1)) * (dx2 - dx1);
      if (x < xl) xl = x;
      if (x > xr) xr = x;
    }
    if ((dy2 <= yc && dy0 > yc) || (dy0 <= yc && dy2 > yc)) {
      x = dx2 + ((yc - dy2) / (dy0 - dy2)) * (dx0 - dx2);
      if (x < xl) xl = x;
      if (x > xr) xr = x;
    }
    if (xl > xr) continue;
    const xs = Math.max(0, Math.ceil(xl - 0.5));
    const xe = Math.min(width - 1, Math.ceil(xr - 0.5) - 1);
    if (xs > xe) continue;
    const px = xs + 0.5 - dx0, py = yc - dy0;
    // Texture coordinates are pixel centres: subtract 0.5 to index the sample grid.
    let u = Math.round((sx0 + ax * px + bx * py - 0.5) * 65536);
    let v = Math.round((sy0 + ay * px + by * py - 0.5) * 65536);
    let o = (y * width + xs) * 3;
    for (let xi = xs; xi <= xe; xi++) {
      const uu = u < 0 ? 0 : u > maxU ? maxU : u;
      const vv = v < 0 ? 0 : v > maxV ? maxV : v;
      const fx = (uu >> 8) & 255, fy = (vv >> 8) & 255;
      const i00 = (vv >> 16) * stride + (uu >> 16) * 3, i01 = i00 + stride;
      const w00 = (256 - fx) * (256 - fy), w10 = fx * (256 - fy), w01 = (256 - fx) * fy, w11 = fx * fy;
      dst[o] = (src[i00]! * w00 + src[i00 + 3]! * w10 + src[i01]! * w01 + src[i01 + 3]! * w11 + 32768) >> 16;
      dst[o + 1] = (src[i00 + 1]! * w00 + src[i00 + 4]! * w10 + src[i01 + 1]! * w01 + src[i01 + 4]! * w11 + 32768) >> 16;
      dst[o + 2] = (src[i00 + 2]! * w00 + src[i00 + 5]! * w10 + src[i01 + 2]! * w01 + src[i01 + 5]! * w11 + 32768) >> 16;
      o += 3;
      u += stepU;
      v += stepV;
    }
  }
}

/**
 * Warps every triangle that moved (any vertex displaced by more than `epsilonPx`); `dst`
 * must already hold a copy of `src` so untouched areas stay as they are.
 */
export function warpMesh(
  src: Uint8Array, dst: Uint8Array, width: number, height: number,
  rest: Float32Array, moved: Float32Array, triangles: Uint16Array, epsilonPx = 0.02,
): number {
  let drawn = 0;
  for (let t = 0; t < triangles.length; t += 3) {
    const a = triangles[t]!, b = triangles[t + 1]!, c = triangles[t + 2]!;
    const ax = moved[2 * a]!, ay = moved[2 * a + 1]!, bx = moved[2 * b]!, by = moved[2 * b + 1]!, cx = moved[2 * c]!, cy = moved[2 * c + 1]!;
    const rax = rest[2 * a]!, ray = rest[2 * a + 1]!, rbx = rest[2 * b]!, rby = rest[2 * b + 1]!, rcx = rest[2 * c]!, rcy = rest[2 * c + 1]!;
    if (
      Math.abs(ax - rax) < epsilonPx && Math.abs(ay - ray) < epsilonPx && Math.abs(bx - rbx) < epsilonPx
      && Math.abs(by - rby) < epsilonPx && Math.abs(cx - rcx) < epsilonPx && Math.abs(cy - rcy) < epsilonPx
    ) continue;
    warpTriangle(src, dst, width, height, rax, ray, rbx, rby, rcx, rcy, ax, ay, bx, by, cx, cy);
    drawn++;
  }
  return drawn;
}
