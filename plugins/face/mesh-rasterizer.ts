/**
 * Software triangle warp: each destination triangle is filled by mapping its pixels back into
 * the source texture with the triangle's affine map and sampling bilinearly. Scanline spans
 * with incremental texture coordinates keep it to a few adds per pixel; the span itself runs
 * in WebAssembly SIMD (warp-kernel.wat) where the runtime has it.
 */
import { readFileSync } from 'node:fs';
import { i420Length, rgbToI420 } from './i420.ts';

/**
 * Warps triangle (s0,s1,s2) of `src` onto (d0,d1,d2) of `dst`. Both are RGB images of
 * `width` x `height`. Pixels whose centre lies inside the destination triangle are written.
 * This is the JavaScript reference of the kernel `MeshWarper` runs (WebAssembly SIMD when the
 * runtime has it): both produce the same bytes.
 */
export function warpTriangle(
  src: Uint8Array, dst: Uint8Array, width: number, height: number,
  sx0: number, sy0: number, sx1: number, sy1: number, sx2: number, sy2: number,
  dx0: number, dy0: number, dx1: number, dy1: number, dx2: number, dy2: number,
): void {
  const rows = jsRows(jsSpan(packedTexture(src, width, height), dst, width), width);
  warpSpans(rows, width, height, sx0, sy0, sx1, sy1, sx2, sy2, dx0, dy0, dx1, dy1, dx2, dy2);
}

const packedTextures = new WeakMap<Uint8Array, Int32Array>();

/**
 * The texture as one 32-bit word per pixel (`r | g << 8 | b << 16`), made once per source
 * image: a bilinear tap is then 4 loads instead of 12, and red and blue blend together in one
 * multiply (each channel keeps 8 spare bits above it). The source must not change afterwards.
 */
function packedTexture(src: Uint8Array, width: number, height: number): Int32Array {
  let packed = packedTextures.get(src);
  if (packed && packed.length === width * height) return packed;
  packed = new Int32Array(width * height);
  packPixels(src, packed);
  packedTextures.set(src, packed);
  return packed;
}

function packPixels(src: Uint8Array, packed: Int32Array): void {
  for (let i = 0, j = 0; i < packed.length; i++, j += 3) packed[i] = src[j]! | (src[j + 1]! << 8) | (src[j + 2]! << 16);
}

/**
 * One row of a triangle: `count` pixels written from byte `dst` on, sampling the texture at
 * (u, v) in 16.16 fixed point stepped by (du, dv), clamped to [0, maxU] x [0, maxV].
 */
type Span = (dst: number, count: number, u: number, v: number, du: number, dv: number, maxU: number, maxV: number) => void;

/** The span in JavaScript: rows blended first, then columns, 8-bit weights, as the kernel does. */
function jsSpan(tex: Int32Array, out: Uint8Array, width: number): Span {
  return (dst, count, u, v, du, dv, maxU, maxV) => {
    for (let n = 0; n < count; n++) {
      const uu = u < 0 ? 0 : u > maxU ? maxU : u;
      const vv = v < 0 ? 0 : v > maxV ? maxV : v;
      const fx = (uu >> 8) & 255, fy = (vv >> 8) & 255, gx = 256 - fx, gy = 256 - fy;
      const i = (vv >> 16) * width + (uu >> 16);
      const p00 = tex[i]!, p10 = tex[i + 1]!, p01 = tex[i + width]!, p11 = tex[i + width + 1]!;
      // Red and blue share a word (8 spare bits each), green has its own; Math.imul and | 0 keep
      // every step in 32-bit integers.
      const rbL = ((Math.imul(p00 & 0xff00ff, gy) + Math.imul(p01 & 0xff00ff, fy) + 0x800080) | 0) >>> 8 & 0xff00ff;
      const rbR = ((Math.imul(p10 & 0xff00ff, gy) + Math.imul(p11 & 0xff00ff, fy) + 0x800080) | 0) >>> 8 & 0xff00ff;
      const gL = (Math.imul(p00 & 0xff00, gy) + Math.imul(p01 & 0xff00, fy) + 0x8000) >>> 8 & 0xff00;
      const gR = (Math.imul(p10 & 0xff00, gy) + Math.imul(p11 & 0xff00, fy) + 0x8000) >>> 8 & 0xff00;
      const rb = ((Math.imul(rbL, gx) + Math.imul(rbR, fx) + 0x800080) | 0) >>> 8;
      const g = (Math.imul(gL, gx) + Math.imul(gR, fx) + 0x8000) >>> 16;
      out[dst] = rb & 255;
      out[dst + 1] = g;
      out[dst + 2] = (rb >>> 16) & 255;
      dst += 3;
      u = (u + du) | 0;
      v = (v + dv) | 0;
    }
  };
}

/**
 * Draws the rows of one triangle: `rows` receives the affine map's set-up (the JavaScript loop
 * below, or the kernel's `rows`, which repeats it in the same f64 operations).
 */
type Rows = (
  minY: number, maxY: number, dx0: number, dy0: number, dx1: number, dy1: number, dx2: number, dy2: number,
  sx0: number, sy0: number, ax: number, bx: number, ay: number, by: number, stepU: number, stepV: number, maxU: number, maxV: number,
) => void;

/** Triangle set-up: the affine map destination -> source, then its rows. */
function warpSpans(
  rows: Rows, width: number, height: number,
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
  const stepU = Math.round(ax * 65536) | 0, stepV = Math.round(ay * 65536) | 0;
  rows(minY, maxY, dx0, dy0, dx1, dy1, dx2, dy2, sx0, sy0, ax, bx, ay, by, stepU, stepV, maxU, maxV);
}

/** The rows in JavaScript: each row's span between the edges it crosses, sampled by `span`. */
function jsRows(span: Span, width: number): Rows {
  return (minY, maxY, dx0, dy0, dx1, dy1, dx2, dy2, sx0, sy0, ax, bx, ay, by, stepU, stepV, maxU, maxV) => {
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
      // Texture coordinates are pixel centres: subtract 0.5 to index the sample grid; rounded
      // half up as floor(x + 0.5), which the kernel can repeat exactly.
      const u = Math.floor((sx0 + ax * px + bx * py - 0.5) * 65536 + 0.5) | 0;
      const v = Math.floor((sy0 + ay * px + by * py - 0.5) * 65536 + 0.5) | 0;
      span((y * width + xs) * 3, xe - xs + 1, u, v, stepU, stepV, maxU, maxV);
    }
  };
}

let kernelModule: WebAssembly.Module | null | undefined;

/** The compiled kernel (once per thread), or null where the runtime lacks WebAssembly SIMD. */
function warpKernel(): WebAssembly.Module | null {
  if (kernelModule === undefined) {
    try {
      kernelModule = new WebAssembly.Module(readFileSync(new URL('./warp-kernel.wasm', import.meta.url)));
    } catch {
      kernelModule = null;
    }
  }
  return kernelModule;
}

/**
 * Warps a mesh over one texture, frame after frame, into a canvas it owns (`canvas`, RGB,
 * valid until the next `warp`). With WebAssembly SIMD (Node 20 has it) the texture and the
 * canvas live in the kernel's memory and each row is one kernel call; `engine: 'js'` (or a
 * runtime without it) runs the JavaScript reference, which writes the same bytes.
 */
export class MeshWarper {
  readonly canvas: Uint8Array;
  readonly engine: 'wasm' | 'js';
  private readonly rows: Rows;
  /** The kernel's I420 conversion of the canvas and where its output lies (wasm only). */
  private readonly kernelI420: ((out: Uint8Array) => Uint8Array) | undefined;
  /** Mesh positions the canvas was last warped with (null: not yet). */
  private previous: Float32Array | null = null;
  /** Painted over since the last warp: [x0, y0, x1, y1]. */
  private dirty: [number, number, number, number] | null = null;

  constructor(private readonly base: Uint8Array, readonly width: number, readonly height: number, options: { engine?: 'wasm' | 'js' } = {}) {
    if (base.length !== width * height * 3) throw new RangeError(`texture must be ${width * height * 3} bytes, got ${base.length}`);
    const module = options.engine === 'js' ? null : warpKernel();
    const pixels = width * height;
    if (module) {
      // Memory: the texture (4 bytes per pixel), the RGB canvas, the I420 picture.
      const texBytes = pixels * 4, canvasBytes = pixels * 3, yuvAt = texBytes + canvasBytes, yuvBytes = i420Length(width, height);
      const instance = new WebAssembly.Instance(module, {});
      const exports = instance.exports as { memory: WebAssembly.Memory; rows: (...args: number[]) => void; i420: (src: number, width: number, height: number, dst: number) => void };
      const needed = Math.ceil((yuvAt + yuvBytes + 16) / 65536) - exports.memory.buffer.byteLength / 65536;
      if (needed > 0) exports.memory.grow(needed);
      packPixels(base, new Int32Array(exports.memory.buffer, 0, pixels));
      this.canvas = new Uint8Array(exports.memory.buffer, texBytes, canvasBytes);
      const kernel = exports.rows, pitch = width * 4;
      this.rows = (minY, maxY, dx0, dy0, dx1, dy1, dx2, dy2, sx0, sy0, ax, bx, ay, by, stepU, stepV, maxU, maxV) =>
        kernel(texBytes, width, minY, maxY, dx0, dy0, dx1, dy1, dx2, dy2, sx0, sy0, ax, bx, ay, by, stepU, stepV, 0, pitch, maxU, maxV);
      const yuv = new Uint8Array(exports.memory.buffer, yuvAt, yuvBytes);
      const even = (width & 1) === 0 && (height & 1) === 0;
      this.kernelI420 = even
        ? (out) => {
          exports.i420(texBytes, width, height, yuvAt);
          out.set(yuv);
          return out;
        }
        : undefined;
      this.engine = 'wasm';
    } else {
      this.canvas = new Uint8Array(pixels * 3);
      this.rows = jsRows(jsSpan(packedTexture(base, width, height), this.canvas, width), width);
      this.kernelI420 = undefined;
      this.engine = 'js';
    }
  }

  /**
   * The canvas as I420 (i420.ts's formulas, bit for bit), into `out` when it is large enough,
   * else into a new buffer.
   */
  toI420(out?: Uint8Array): Uint8Array {
    const length = i420Length(this.width, this.height);
    if (!this.kernelI420) return rgbToI420(this.canvas, this.width, this.height, out && out.length >= length ? out : undefined);
    return this.kernelI420(out && out.length >= length ? out.subarray(0, length) : new Uint8Array(length));
  }

  /**
   * Warps `moved` over the canvas, incrementally: the canvas keeps the previous warp's pixels,
   * and only triangles whose vertices changed since it (exactly), or that touch a rectangle the
   * caller painted over since (`markDirty`), are drawn again; a triangle back at rest is drawn
   * as the identity warp, which copies the texture exactly. The mesh never folds, so triangles
   * partition the canvas and each pixel is its triangle's: the canvas is byte for byte what a
   * full redraw over the texture would give. The first warp (or one with a different mesh size)
   * starts from the texture. Returns how many triangles were drawn.
   */
  warp(rest: Float32Array, moved: Float32Array, triangles: Uint16Array): number {
    const { base, width, height, rows } = this;
    let previous = this.previous;
    if (!previous || previous.length !== moved.length) {
      this.canvas.set(base);
      previous = this.previous = Float32Array.from(rest);
      this.dirty = null;
    }
    const d = this.dirty;
    let drawn = 0;
    for (let t = 0; t < triangles.length; t += 3) {
      const a = triangles[t]!, b = triangles[t + 1]!, c = triangles[t + 2]!;
      const ax = moved[2 * a]!, ay = moved[2 * a + 1]!, bx = moved[2 * b]!, by = moved[2 * b + 1]!, cx = moved[2 * c]!, cy = moved[2 * c + 1]!;
      const same = ax === previous[2 * a] && ay === previous[2 * a + 1] && bx === previous[2 * b] && by === previous[2 * b + 1]
        && cx === previous[2 * c] && cy === previous[2 * c + 1];
      if (same && (!d || Math.max(ax, bx, cx) < d[0] || Math.min(ax, bx, cx) > d[2] || Math.max(ay, by, cy) < d[1] || Math.min(ay, by, cy) > d[3])) continue;
      warpSpans(rows, width, height, rest[2 * a]!, rest[2 * a + 1]!, rest[2 * b]!, rest[2 * b + 1]!, rest[2 * c]!, rest[2 * c + 1]!, ax, ay, bx, by, cx, cy);
      drawn++;
    }
    previous.set(moved);
    this.dirty = null;
    return drawn;
  }

  /** The caller painted over [x0, x1] x [y0, y1] (canvas pixels) after the last warp: the next warp redraws it. */
  markDirty(x0: number, y0: number, x1: number, y1: number): void {
    const d = this.dirty;
    this.dirty = d ? [Math.min(d[0], x0), Math.min(d[1], y0), Math.max(d[2], x1), Math.max(d[3], y1)] : [x0, y0, x1, y1];
  }
}
