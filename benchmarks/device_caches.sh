#!/bin/sh
# Builds, on the CPU side, every prebuilt sm_90 cache benchmarks/device_run.sh carries to the
# device machine (devcache/ is git-ignored), each packed as devcache/NAME.tar.xz:
#   sm90-cache  the full sm_90 walk (speed, verify);
#   pergeo      fp16 sync.default.none: one kernel per geometry of the walk;
#   asyncgeo    fp16 async.default.none: the cp.async loop at every geometry it is walked at;
#   asyncvar    every async variant x dtype key at three cover geometries (edge problems);
#   variants    every sync variant x dtype key at five cover geometries (edge problems);
#   ring        every async variant at the wide tiles, rings of 2, 3 and 4 stages;
#   planted     benchmarks/device_plant.py's off-by-one cache (a folder, not packed).
# $JOBS workers (default 2). Run from the repo root: `make devcache`.
set -eu
J=${JOBS:-2}
B="wgradcache build --target sm_90 --jobs $J"
DT="--dtype fp16 --dtype bf16 --dtype fp16_f32 --dtype bf16_f32"
mkdir -p devcache
pack() { rm -f "devcache/$1.tar.xz"; tar -cJf "devcache/$1.tar.xz" -C "$2" cache; }
$B --cache-dir devcache/cache
# a rebuild leaves the replaced kernels' blobs behind: verify would count each as a failure
wgradcache gc --orphans --cache-dir devcache/cache >/dev/null
pack sm90-cache devcache
rm -rf devcache/pergeo devcache/asyncgeo devcache/asyncvar devcache/variants
$B --variant sync.default.none --dtype fp16 --cache-dir devcache/pergeo/cache
pack pergeo devcache/pergeo
$B --variant async.default.none --dtype fp16 --cache-dir devcache/asyncgeo/cache
pack asyncgeo devcache/asyncgeo
# shellcheck disable=SC2086
$B $DT --variant async.default.none --variant async.default.atomic \
  --variant async.cshuffle.none --variant async.cshuffle.atomic \
  --geometry t64x64x32-w2x2 --geometry t128x64x32-w2x2 --geometry t32x128x64-w1x2 \
  --cache-dir devcache/asyncvar/cache
pack asyncvar devcache/asyncvar
# shellcheck disable=SC2086
$B $DT --variant sync.default.none --variant sync.default.atomic \
  --variant sync.default.two_stage --variant sync.cshuffle.none --variant sync.cshuffle.atomic \
  --geometry t64x64x32-w2x2 --geometry t128x128x32-w2x4 --geometry t128x64x64-w4x2 \
  --geometry t32x32x32-w1x1 --geometry t64x128x64-w2x4 --cache-dir devcache/variants/cache
pack variants devcache/variants
# the deeper async rings (-s3, -s4) and their two-stage twins: every async variant of the
# default dtypes at the wide tiles geometries.yaml's stages deepens
rm -rf devcache/ring
$B --variant async.default.none --variant async.default.atomic \
  --variant async.cshuffle.none --variant async.cshuffle.atomic \
  --geometry t128x128x32-w2x2 --geometry t128x128x32-w2x4 --geometry t128x128x64-w4x2 \
  --geometry t128x256x32-w2x4 --geometry t256x128x32-w4x2 --cache-dir devcache/ring/cache
pack ring devcache/ring
PYTHONPATH=src python3 benchmarks/device_plant.py --out devcache/planted
