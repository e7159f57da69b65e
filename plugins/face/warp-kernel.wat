;; The face warp's loops in WebAssembly SIMD (compiled by `npm run build:wasm` into
;; warp-kernel.wasm, checked in): mesh-rasterizer.ts computes each triangle's affine map and
;; calls `rows`, which finds each row's span and samples it (`span`); `i420` converts the canvas.
;;
;; Memory holds the texture as 4 bytes per pixel (r, g, b, 0) and the RGB canvas; offsets are
;; passed in. A bilinear tap loads its two texels of a row as one 8-byte read widened to eight
;; 16-bit lanes, blends the rows with the vertical weights, then the columns with the horizontal
;; ones: the same 8-bit weights and rounding as the JavaScript reference (`jsSpan`).
(module
  (memory (export "memory") 1)

  ;; Writes `count` RGB pixels at byte `dst`, sampling texture coordinates (u, v) in 16.16 fixed
  ;; point (pixel-centre grid), stepping by (du, dv) per pixel, each clamped to [0, maxU] x [0, maxV]
  ;; so the 2x2 tap stays inside. `tex` is the texture's byte offset, `pitch` its row in bytes.
  (func $span (export "span")
    (param $dst i32) (param $count i32) (param $u i32) (param $v i32) (param $du i32) (param $dv i32)
    (param $tex i32) (param $pitch i32) (param $maxU i32) (param $maxV i32)
    (local $end i32) (local $uu i32) (local $vv i32) (local $fx i32) (local $fy i32) (local $at i32)
    (local $rows v128) (local $cols v128) (local $out i32)
    (local.set $end (i32.add (local.get $dst) (i32.mul (local.get $count) (i32.const 3))))
    (block $done
      (br_if $done (i32.le_s (local.get $count) (i32.const 0)))
      (loop $pixel
        (local.set $uu (select (local.get $u) (i32.const 0) (i32.gt_s (local.get $u) (i32.const 0))))
        (local.set $uu (select (local.get $maxU) (local.get $uu) (i32.gt_s (local.get $uu) (local.get $maxU))))
        (local.set $vv (select (local.get $v) (i32.const 0) (i32.gt_s (local.get $v) (i32.const 0))))
        (local.set $vv (select (local.get $maxV) (local.get $vv) (i32.gt_s (local.get $vv) (local.get $maxV))))
        (local.set $fx (i32.and (i32.shr_u (local.get $uu) (i32.const 8)) (i32.const 255)))
        (local.set $fy (i32.and (i32.shr_u (local.get $vv) (i32.const 8)) (i32.const 255)))
        (local.set $at
          (i32.add (local.get $tex)
            (i32.add
              (i32.mul (i32.shr_u (local.get $vv) (i32.const 16)) (local.get $pitch))
              (i32.shl (i32.shr_u (local.get $uu) (i32.const 16)) (i32.const 2)))))
        ;; Rows: top * (256 - fy) + bottom * fy, rounded, >> 8: [r0 g0 b0 a0 r1 g1 b1 a1] of the two columns.
        (local.set $rows
          (i16x8.shr_u
            (i16x8.add
              (i16x8.add
                (i16x8.mul (v128.load8x8_u (local.get $at)) (i16x8.splat (i32.sub (i32.const 256) (local.get $fy))))
                (i16x8.mul (v128.load8x8_u (i32.add (local.get $at) (local.get $pitch))) (i16x8.splat (local.get $fy))))
              (v128.const i16x8 128 128 128 128 128 128 128 128))
            (i32.const 8)))
        ;; Columns: left * (256 - fx) in lanes 0-3, right * fx in lanes 4-7, then the halves added.
        (local.set $cols
          (i16x8.mul (local.get $rows)
            (i64x2.replace_lane 1
              (i64x2.splat (i64.mul (i64.extend_i32_u (i32.sub (i32.const 256) (local.get $fx))) (i64.const 0x0001000100010001)))
              (i64.mul (i64.extend_i32_u (local.get $fx)) (i64.const 0x0001000100010001)))))
        (local.set $out
          (i32x4.extract_lane 0
            (i8x16.narrow_i16x8_u
              (i16x8.shr_u
                (i16x8.add
                  (i16x8.add (local.get $cols)
                    (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $cols) (local.get $cols)))
                  (v128.const i16x8 128 128 128 128 128 128 128 128))
                (i32.const 8))
              (local.get $cols))))
        (i32.store16 (local.get $dst) (local.get $out))
        (i32.store8 offset=2 (local.get $dst) (i32.shr_u (local.get $out) (i32.const 16)))
        (local.set $dst (i32.add (local.get $dst) (i32.const 3)))
        (local.set $u (i32.add (local.get $u) (local.get $du)))
        (local.set $v (i32.add (local.get $v) (local.get $dv)))
        (br_if $pixel (i32.lt_u (local.get $dst) (local.get $end))))))

  ;; The rows of one triangle: the JavaScript set-up (mesh-rasterizer.ts, `jsRows`) step for
  ;; step in the same f64 operations, so both write the same pixels. (dx, dy) are the destination
  ;; vertices, (sx0, sy0) the source of the first; (ax, bx, ay, by) the affine map's derivatives.
  (func (export "rows")
    (param $canvas i32) (param $width i32) (param $minY i32) (param $maxY i32)
    (param $dx0 f64) (param $dy0 f64) (param $dx1 f64) (param $dy1 f64) (param $dx2 f64) (param $dy2 f64)
    (param $sx0 f64) (param $sy0 f64) (param $ax f64) (param $bx f64) (param $ay f64) (param $by f64)
    (param $stepU i32) (param $stepV i32) (param $tex i32) (param $pitch i32) (param $maxU i32) (param $maxV i32)
    (local $y i32) (local $yc f64) (local $xl f64) (local $xr f64) (local $x f64) (local $xs i32) (local $xe i32)
    (local $px f64) (local $py f64)
    (local.set $y (local.get $minY))
    (block $done
      (loop $row
        (br_if $done (i32.gt_s (local.get $y) (local.get $maxY)))
        (block $next
          (local.set $yc (f64.add (f64.convert_i32_s (local.get $y)) (f64.const 0.5)))
          (local.set $xl (f64.const inf))
          (local.set $xr (f64.const -inf))
          ;; Each edge that crosses the row's centre (half-open in y).
          (if (i32.or
                (i32.and (f64.le (local.get $dy0) (local.get $yc)) (f64.gt (local.get $dy1) (local.get $yc)))
                (i32.and (f64.le (local.get $dy1) (local.get $yc)) (f64.gt (local.get $dy0) (local.get $yc))))
            (then
              (local.set $x (f64.add (local.get $dx0)
                (f64.mul (f64.div (f64.sub (local.get $yc) (local.get $dy0)) (f64.sub (local.get $dy1) (local.get $dy0)))
                  (f64.sub (local.get $dx1) (local.get $dx0)))))
              (if (f64.lt (local.get $x) (local.get $xl)) (then (local.set $xl (local.get $x))))
              (if (f64.gt (local.get $x) (local.get $xr)) (then (local.set $xr (local.get $x))))))
          (if (i32.or
                (i32.and (f64.le (local.get $dy1) (local.get $yc)) (f64.gt (local.get $dy2) (local.get $yc)))
                (i32.and (f64.le (local.get $dy2) (local.get $yc)) (f64.gt (local.get $dy1) (local.get $yc))))
            (then
              (local.set $x (f64.add (local.get $dx1)
                (f64.mul (f64.div (f64.sub (local.get $yc) (local.get $dy1)) (f64.sub (local.get $dy2) (local.get $dy1)))
                  (f64.sub (local.get $dx2) (local.get $dx1)))))
              (if (f64.lt (local.get $x) (local.get $xl)) (then (local.set $xl (local.get $x))))
              (if (f64.gt (local.get $x) (local.get $xr)) (then (local.set $xr (local.get $x))))))
          (if (i32.or
                (i32.and (f64.le (local.get $dy2) (local.get $yc)) (f64.gt (local.get $dy0) (local.get $yc)))
                (i32.and (f64.le (local.get $dy0) (local.get $yc)) (f64.gt (local.get $dy2) (local.get $yc))))
            (then
              (local.set $x (f64.add (local.get $dx2)
                (f64.mul (f64.div (f64.sub (local.get $yc) (local.get $dy2)) (f64.sub (local.get $dy0) (local.get $dy2)))
                  (f64.sub (local.get $dx0) (local.get $dx2)))))
              (if (f64.lt (local.get $x) (local.get $xl)) (then (local.set $xl (local.get $x))))
              (if (f64.gt (local.get $x) (local.get $xr)) (then (local.set $xr (local.get $x))))))
          (br_if $next (f64.gt (local.get $xl) (local.get $xr)))
          (local.set $xs (i32.trunc_sat_f64_s (f64.max (f64.const 0) (f64.ceil (f64.sub (local.get $xl) (f64.const 0.5))))))
          (local.set $xe (i32.trunc_sat_f64_s (f64.min (f64.convert_i32_s (i32.sub (local.get $width) (i32.const 1)))
            (f64.sub (f64.ceil (f64.sub (local.get $xr) (f64.const 0.5))) (f64.const 1)))))
          (br_if $next (i32.gt_s (local.get $xs) (local.get $xe)))
          (local.set $px (f64.sub (f64.add (f64.convert_i32_s (local.get $xs)) (f64.const 0.5)) (local.get $dx0)))
          (local.set $py (f64.sub (local.get $yc) (local.get $dy0)))
          (call $span
            (i32.add (local.get $canvas) (i32.mul (i32.add (i32.mul (local.get $y) (local.get $width)) (local.get $xs)) (i32.const 3)))
            (i32.add (i32.sub (local.get $xe) (local.get $xs)) (i32.const 1))
            ;; floor((s0 + a*px + b*py - 0.5) * 65536 + 0.5) for u and v, as the reference rounds.
            (i32.trunc_sat_f64_s (f64.floor (f64.add (f64.mul (f64.sub (f64.add (f64.add (local.get $sx0) (f64.mul (local.get $ax) (local.get $px))) (f64.mul (local.get $bx) (local.get $py))) (f64.const 0.5)) (f64.const 65536)) (f64.const 0.5))))
            (i32.trunc_sat_f64_s (f64.floor (f64.add (f64.mul (f64.sub (f64.add (f64.add (local.get $sy0) (f64.mul (local.get $ay) (local.get $px))) (f64.mul (local.get $by) (local.get $py))) (f64.const 0.5)) (f64.const 65536)) (f64.const 0.5))))
            (local.get $stepU) (local.get $stepV) (local.get $tex) (local.get $pitch) (local.get $maxU) (local.get $maxV)))
        (local.set $y (i32.add (local.get $y) (i32.const 1)))
        (br $row))))

  ;; RGB (`src`, width*height*3 bytes) to I420 at `dst` (Y plane, then U and V at half size), the
  ;; BT.601 limited-range integer formulas of i420.ts (and libyuv), bit for bit. Two rows of eight
  ;; pixels per step: the RGB bytes are split into channels by shuffles, luma is computed in 16-bit
  ;; lanes, chroma from the 2x2 sums in 32-bit lanes. Widths and heights must be even. A shuffle
  ;; picks one channel of 8 pixels (24 bytes) from two overlapping 16-byte loads ($a: bytes 0-15,
  ;; $b: bytes 8-23, its lanes numbered 16-31).
  (func (export "i420") (param $src i32) (param $width i32) (param $height i32) (param $dst i32)
    (local $y i32) (local $x i32) (local $p0 i32) (local $p1 i32) (local $y0 i32) (local $y1 i32)
    (local $u i32) (local $v i32) (local $stride i32) (local $cw i32) (local $uBase i32) (local $vBase i32)
    (local $a0 v128) (local $b0 v128) (local $a1 v128) (local $b1 v128)
    (local $r0 v128) (local $g0 v128) (local $bl0 v128) (local $r1 v128) (local $g1 v128) (local $bl1 v128)
    (local $rs v128) (local $gs v128) (local $bs v128)
    (local $r i32) (local $g i32) (local $b i32) (local $k i32) (local $q i32)
    (local.set $stride (i32.mul (local.get $width) (i32.const 3)))
    (local.set $cw (i32.shr_u (local.get $width) (i32.const 1)))
    (local.set $uBase (i32.add (local.get $dst) (i32.mul (local.get $width) (local.get $height))))
    (local.set $vBase (i32.add (local.get $uBase) (i32.mul (local.get $cw) (i32.shr_u (local.get $height) (i32.const 1)))))
    (local.set $y (i32.const 0))
    (block $rowsDone
      (loop $rows
        (br_if $rowsDone (i32.ge_u (local.get $y) (local.get $height)))
        (local.set $p0 (i32.add (local.get $src) (i32.mul (local.get $y) (local.get $stride))))
        (local.set $p1 (i32.add (local.get $p0) (local.get $stride)))
        (local.set $y0 (i32.add (local.get $dst) (i32.mul (local.get $y) (local.get $width))))
        (local.set $y1 (i32.add (local.get $y0) (local.get $width)))
        (local.set $u (i32.add (local.get $uBase) (i32.mul (i32.shr_u (local.get $y) (i32.const 1)) (local.get $cw))))
        (local.set $v (i32.add (local.get $vBase) (i32.mul (i32.shr_u (local.get $y) (i32.const 1)) (local.get $cw))))
        (local.set $x (i32.const 0))
        ;; Eight pixels at a time.
        (block $vecDone
          (loop $vec
            (br_if $vecDone (i32.gt_u (i32.add (local.get $x) (i32.const 8)) (local.get $width)))
            (local.set $a0 (v128.load (local.get $p0)))
            (local.set $b0 (v128.load offset=8 (local.get $p0)))
            (local.set $a1 (v128.load (local.get $p1)))
            (local.set $b1 (v128.load offset=8 (local.get $p1)))
            (local.set $r0 (i16x8.extend_low_i8x16_u (i8x16.shuffle 0 3 6 9 12 15 26 29 0 0 0 0 0 0 0 0 (local.get $a0) (local.get $b0))))
            (local.set $g0 (i16x8.extend_low_i8x16_u (i8x16.shuffle 1 4 7 10 13 24 27 30 0 0 0 0 0 0 0 0 (local.get $a0) (local.get $b0))))
            (local.set $bl0 (i16x8.extend_low_i8x16_u (i8x16.shuffle 2 5 8 11 14 25 28 31 0 0 0 0 0 0 0 0 (local.get $a0) (local.get $b0))))
            (local.set $r1 (i16x8.extend_low_i8x16_u (i8x16.shuffle 0 3 6 9 12 15 26 29 0 0 0 0 0 0 0 0 (local.get $a1) (local.get $b1))))
            (local.set $g1 (i16x8.extend_low_i8x16_u (i8x16.shuffle 1 4 7 10 13 24 27 30 0 0 0 0 0 0 0 0 (local.get $a1) (local.get $b1))))
            (local.set $bl1 (i16x8.extend_low_i8x16_u (i8x16.shuffle 2 5 8 11 14 25 28 31 0 0 0 0 0 0 0 0 (local.get $a1) (local.get $b1))))
            (i64.store (local.get $y0) (i64x2.extract_lane 0
              (i8x16.narrow_i16x8_u
                (i16x8.add
                  (i16x8.shr_u
                    (i16x8.add
                      (i16x8.add
                        (i16x8.mul (local.get $r0) (v128.const i16x8 66 66 66 66 66 66 66 66))
                        (i16x8.mul (local.get $g0) (v128.const i16x8 129 129 129 129 129 129 129 129)))
                      (i16x8.add
                        (i16x8.mul (local.get $bl0) (v128.const i16x8 25 25 25 25 25 25 25 25))
                        (v128.const i16x8 128 128 128 128 128 128 128 128)))
                    (i32.const 8))
                  (v128.const i16x8 16 16 16 16 16 16 16 16))
                (local.get $r0))))
            (i64.store (local.get $y1) (i64x2.extract_lane 0
              (i8x16.narrow_i16x8_u
                (i16x8.add
                  (i16x8.shr_u
                    (i16x8.add
                      (i16x8.add
                        (i16x8.mul (local.get $r1) (v128.const i16x8 66 66 66 66 66 66 66 66))
                        (i16x8.mul (local.get $g1) (v128.const i16x8 129 129 129 129 129 129 129 129)))
                      (i16x8.add
                        (i16x8.mul (local.get $bl1) (v128.const i16x8 25 25 25 25 25 25 25 25))
                        (v128.const i16x8 128 128 128 128 128 128 128 128)))
                    (i32.const 8))
                  (v128.const i16x8 16 16 16 16 16 16 16 16))
                (local.get $r1))))
            ;; 2x2 means, (sum + 2) >> 2, as four 32-bit lanes per channel.
            (local.set $rs (i32x4.shr_u (i32x4.add (i32x4.add (i32x4.extadd_pairwise_i16x8_u (local.get $r0)) (i32x4.extadd_pairwise_i16x8_u (local.get $r1))) (v128.const i32x4 2 2 2 2)) (i32.const 2)))
            (local.set $gs (i32x4.shr_u (i32x4.add (i32x4.add (i32x4.extadd_pairwise_i16x8_u (local.get $g0)) (i32x4.extadd_pairwise_i16x8_u (local.get $g1))) (v128.const i32x4 2 2 2 2)) (i32.const 2)))
            (local.set $bs (i32x4.shr_u (i32x4.add (i32x4.add (i32x4.extadd_pairwise_i16x8_u (local.get $bl0)) (i32x4.extadd_pairwise_i16x8_u (local.get $bl1))) (v128.const i32x4 2 2 2 2)) (i32.const 2)))
            (i32.store (local.get $u) (i32x4.extract_lane 0
              (i8x16.narrow_i16x8_u
                (i16x8.narrow_i32x4_s
                  (i32x4.add
                    (i32x4.shr_s
                      (i32x4.add
                        (i32x4.add
                          (i32x4.mul (local.get $bs) (v128.const i32x4 112 112 112 112))
                          (i32x4.mul (local.get $gs) (v128.const i32x4 -74 -74 -74 -74)))
                        (i32x4.add
                          (i32x4.mul (local.get $rs) (v128.const i32x4 -38 -38 -38 -38))
                          (v128.const i32x4 128 128 128 128)))
                      (i32.const 8))
                    (v128.const i32x4 128 128 128 128))
                  (local.get $bs))
                (local.get $bs))))
            (i32.store (local.get $v) (i32x4.extract_lane 0
              (i8x16.narrow_i16x8_u
                (i16x8.narrow_i32x4_s
                  (i32x4.add
                    (i32x4.shr_s
                      (i32x4.add
                        (i32x4.add
                          (i32x4.mul (local.get $rs) (v128.const i32x4 112 112 112 112))
                          (i32x4.mul (local.get $gs) (v128.const i32x4 -94 -94 -94 -94)))
                        (i32x4.add
                          (i32x4.mul (local.get $bs) (v128.const i32x4 -18 -18 -18 -18))
                          (v128.const i32x4 128 128 128 128)))
                      (i32.const 8))
                    (v128.const i32x4 128 128 128 128))
                  (local.get $rs))
                (local.get $rs))))
            (local.set $p0 (i32.add (local.get $p0) (i32.const 24)))
            (local.set $p1 (i32.add (local.get $p1) (i32.const 24)))
            (local.set $y0 (i32.add (local.get $y0) (i32.const 8)))
            (local.set $y1 (i32.add (local.get $y1) (i32.const 8)))
            (local.set $u (i32.add (local.get $u) (i32.const 4)))
            (local.set $v (i32.add (local.get $v) (i32.const 4)))
            (local.set $x (i32.add (local.get $x) (i32.const 8)))
            (br $vec)))
        ;; The rest of the row (widths that are not a multiple of 8), a 2x2 block at a time.
        (block $tailDone
          (loop $tail
            (br_if $tailDone (i32.ge_u (local.get $x) (local.get $width)))
            (local.set $r (i32.const 0)) (local.set $g (i32.const 0)) (local.set $b (i32.const 0))
            (local.set $k (i32.const 0))
            (loop $px
              ;; k: 0 (row 0, left) 1 (row 0, right) 2 (row 1, left) 3 (row 1, right)
              (local.set $q (i32.add (select (local.get $p1) (local.get $p0) (i32.ge_u (local.get $k) (i32.const 2))) (i32.mul (i32.and (local.get $k) (i32.const 1)) (i32.const 3))))
              (i32.store8
                (i32.add (select (local.get $y1) (local.get $y0) (i32.ge_u (local.get $k) (i32.const 2))) (i32.and (local.get $k) (i32.const 1)))
                (i32.add (i32.shr_s (i32.add (i32.add (i32.mul (i32.load8_u (local.get $q)) (i32.const 66)) (i32.mul (i32.load8_u offset=1 (local.get $q)) (i32.const 129)))
                  (i32.add (i32.mul (i32.load8_u offset=2 (local.get $q)) (i32.const 25)) (i32.const 128))) (i32.const 8)) (i32.const 16)))
              (local.set $r (i32.add (local.get $r) (i32.load8_u (local.get $q))))
              (local.set $g (i32.add (local.get $g) (i32.load8_u offset=1 (local.get $q))))
              (local.set $b (i32.add (local.get $b) (i32.load8_u offset=2 (local.get $q))))
              (local.set $k (i32.add (local.get $k) (i32.const 1)))
              (br_if $px (i32.lt_u (local.get $k) (i32.const 4))))
            (local.set $r (i32.shr_u (i32.add (local.get $r) (i32.const 2)) (i32.const 2)))
            (local.set $g (i32.shr_u (i32.add (local.get $g) (i32.const 2)) (i32.const 2)))
            (local.set $b (i32.shr_u (i32.add (local.get $b) (i32.const 2)) (i32.const 2)))
            (i32.store8 (local.get $u) (i32.add (i32.shr_s (i32.add (i32.sub (i32.sub (i32.mul (local.get $b) (i32.const 112)) (i32.mul (local.get $g) (i32.const 74))) (i32.mul (local.get $r) (i32.const 38))) (i32.const 128)) (i32.const 8)) (i32.const 128)))
            (i32.store8 (local.get $v) (i32.add (i32.shr_s (i32.add (i32.sub (i32.sub (i32.mul (local.get $r) (i32.const 112)) (i32.mul (local.get $g) (i32.const 94))) (i32.mul (local.get $b) (i32.const 18))) (i32.const 128)) (i32.const 8)) (i32.const 128)))
            (local.set $p0 (i32.add (local.get $p0) (i32.const 6)))
            (local.set $p1 (i32.add (local.get $p1) (i32.const 6)))
            (local.set $y0 (i32.add (local.get $y0) (i32.const 2)))
            (local.set $y1 (i32.add (local.get $y1) (i32.const 2)))
            (local.set $u (i32.add (local.get $u) (i32.const 1)))
            (local.set $v (i32.add (local.get $v) (i32.const 1)))
            (local.set $x (i32.add (local.get $x) (i32.const 2)))
            (br $tail)))
        (local.set $y (i32.add (local.get $y) (i32.const 2)))
        (br $rows))))
)
