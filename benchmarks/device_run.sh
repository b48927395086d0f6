#!/bin/sh
# Everything the bare sm_90 device machine runs, from the repo root (the lead's `run` tool):
#   1. the carried wheels (.whl/: pyelftools, which the CUDA image lacks) into /tmp/site;
#   2. the planted off-by-one cache devcache/planted (benchmarks/device_plant.py, built on the
#      CPU side): verify --device cuda must fail exactly its planted entry;
#   3. benchmarks/device_speed.py (ResNet-50 batch 32, fp16 and bf16, vs cuDNN; top $SPEED_TOP
#      of select's candidates per layer);
#   4. verify --device cuda --level numerics --no-reproduce (the device machine has not the
#      build's libLLVM-22) on the prebuilt sm_90 cache carried in the tree: devcache/cache,
#      or devcache/sm90-cache.tar.xz unpacked into /tmp ($DEVCACHE overrides; numerics on a
#      sample of it: $VERIFY_SAMPLE, default 0.1);
#   5. the pipelined sync loop at every geometry of the walk: verify every entry of
#      devcache/pergeo.tar.xz (`build --target sm_90 --variant sync.default.none --dtype fp16`);
#      the cp.async loop the same way (asyncgeo: `--variant async.default.none --dtype fp16`)
#      and its variants x dtypes on the edge problems (asyncvar: the async.* variants of
#      fp16, bf16, fp16_f32, bf16_f32 at t64x64x32-w2x2, t128x64x32-w2x2, t32x128x64-w1x2),
#      and the sync variants x dtypes the same way (variants); every cache here is built
#      by benchmarks/device_caches.sh (`make devcache`);
#   6. Nsight Compute (when ncu is there) on select's pick for $NCU_LAYER: speed of light,
#      occupancy, memory and the stall reasons per issued instruction.
#   ringl, dw: the -s3/-s4 rings and the depthwise kernels of the full cache itself.
# $SPEED_ARGS: more device_speed.py options (--dtype, --include, --sweep). Each step has a timeout; $STEPS (default "planted speed verify pergeo ncu"; also asyncgeo,
# asyncvar, variants, and geo, asyncl, bigvar on the full cache itself) picks the steps of one call, so calls of the device tool (600 s each)
# can split them (12-04: "asyncgeo asyncvar speed", then "variants" alone at 520 s).
# Writes into $OUT (default ./device-out): env.txt, planted.txt/json, speed.txt/json,
# verify.txt/json, pergeo.txt/json, ncu.txt: 10 files, and the device tool brings back 8 at
# most (on 12-04 it left verify.* out): skip a step (unset its input) to keep one. Exit status: verify's, else the benchmark's.
set -u
OUT=${OUT:-$PWD/device-out}
if [ -z "${DEVCACHE:-}" ] && [ -f devcache/sm90-cache.tar.xz ]; then
  mkdir -p /tmp/devcache && tar -xJf devcache/sm90-cache.tar.xz -C /tmp/devcache || exit 3
  DEVCACHE=/tmp/devcache/cache
fi
DEVCACHE=${DEVCACHE:-devcache/cache}
VERIFY_SAMPLE=${VERIFY_SAMPLE:-0.1}
STEPS=${STEPS:-planted speed verify pergeo ncu}
step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
rc=0 rc2=0
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
# the image's CUDA tools (nvdisasm for structure; ptxas is not needed there)
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
export PATH
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv;
  python3 -c 'import torch, cuda.bindings, numpy; print("torch", torch.__version__,
    "cudnn", torch.backends.cudnn.version(), "cuda-bindings", cuda.bindings.__version__,
    "numpy", numpy.__version__)';
  command -v nvdisasm ptxas cuobjdump;
  python3 -m wgradcache toolchain 2>&1 | tail -20; } > "$OUT/env.txt" 2>&1
# 1. the planted off-by-one (benchmarks/device_plant.py, built here on the CPU side): verify
#    must fail exactly the label in planted.txt and pass the rest of that small cache.
if step planted && [ -f devcache/planted/planted.txt ]; then
  timeout 120 python3 -m wgradcache verify --from-cache --cache-dir devcache/planted/cache \
    --target sm_90 --level numerics --device cuda --no-reproduce --json \
    > "$OUT/planted.json" 2> "$OUT/planted.txt"
  echo "planted verify exit $? (expected 1, failing only $(cat devcache/planted/planted.txt))" \
    >> "$OUT/planted.txt"
fi
# 2. the speed benchmark (its JSON is rewritten after each dtype: a timeout keeps fp16)
if step speed; then
  # shellcheck disable=SC2086
  timeout "${SPEED_TIMEOUT:-330}" python3 benchmarks/device_speed.py --cache-dir "$DEVCACHE" \
    --top "${SPEED_TOP:-12}" ${SPEED_ARGS:-} --out "$OUT/speed.json" > "$OUT/speed.txt" 2>&1
  rc2=$?
  echo "device_speed exit $rc2" >> "$OUT/speed.txt"
fi
# 3. numerics of a sample of the cache on the device
if step verify; then
  timeout "${VERIFY_TIMEOUT:-240}" python3 -m wgradcache verify --from-cache \
    --cache-dir "$DEVCACHE" --target sm_90 --level numerics --device cuda --no-reproduce \
    --sample "$VERIFY_SAMPLE" --json > "$OUT/verify.json" 2> "$OUT/verify.txt"
  rc=$?
  echo "verify exit $rc" >> "$OUT/verify.txt"
fi
# 4. every entry of a small prebuilt cache devcache/NAME.tar.xz on the device, with the
#    default problems or the edge problems ($EDGE_PROBLEMS): NAME.json / NAME.txt, and
#    NAME.jsonl line by line as entries finish (what a step cut short by its timeout keeps)
verify_tar() {  # NAME TIMEOUT [verify options]
  name=$1 limit=$2; shift 2
  [ -f "devcache/$name.tar.xz" ] || return 0
  mkdir -p "/tmp/$name" && tar -xJf "devcache/$name.tar.xz" -C "/tmp/$name" &&
  timeout "$limit" python3 -m wgradcache verify --from-cache --cache-dir "/tmp/$name/cache" \
    --target sm_90 --level numerics --device cuda --no-reproduce --json "$@" \
    --stream "$OUT/$name.jsonl" > "$OUT/$name.json" 2> "$OUT/$name.txt"
  echo "$name verify exit $?" >> "$OUT/$name.txt"
}
EDGE_PROBLEMS=${EDGE_PROBLEMS:-"2,16,7,7,24,3,3,1,1 2,16,9,9,24,3,3,2,1 1,16,11,11,24,3,3,1,2,2
  2,32,8,8,32,3,3,1,1,1,2 1,8,5,7,8,3,3,1,1 3,8,5,7,16,1,1,1,0 2,3,9,9,16,3,3,2,1"}
edge_args() { for p in $EDGE_PROBLEMS; do printf ' --problem %s' "$p"; done; }
#    the pipelined sync loop at every geometry of the walk (fp16 sync.default.none, one
#    kernel per geometry: devcache/pergeo.tar.xz)
step pergeo && verify_tar pergeo "${PERGEO_TIMEOUT:-200}"
#    the cp.async loop at every geometry of the walk (fp16 async.default.none: asyncgeo) and
#    its four variants x four dtype keys on the edge problems (asyncvar)
step asyncgeo && verify_tar asyncgeo "${ASYNC_TIMEOUT:-150}"
# shellcheck disable=SC2046
step asyncvar && verify_tar asyncvar "${ASYNC_TIMEOUT:-150}" $(edge_args)
#    the sync loop's variants x dtype keys on the edge problems (variants: every sync variant
#    of fp16, bf16, fp16_f32, bf16_f32 at t64x64x32-w2x2, t128x128x32-w2x4, t128x64x64-w4x2,
#    t32x32x32-w1x1, t64x128x64-w2x4), a sample of it
# shellcheck disable=SC2046
step variants && verify_tar variants "${VARIANTS_TIMEOUT:-400}" \
  --sample "${VARIANTS_SAMPLE:-0.6}" $(edge_args)
#    the deeper async rings (-s3, -s4 of devcache/ring.tar.xz) with the default problems
#    (split degrees 1, 2, 3, 7 and the policy's), or with $RING_EDGE set on the edge problems
# shellcheck disable=SC2046
step ring && verify_tar ring "${RING_TIMEOUT:-300}" --label '-s[34]$' \
  $([ -n "${RING_EDGE:-}" ] && edge_args)
#    the same proofs on the full cache itself, no tarball of their own (verify --label:
#    structure and numerics on the entries a regex finds): geo = every geometry's fp16
#    sync.default.none kernel (pergeo's set), asyncl = every fp16 async.default.none
#    (asyncgeo's), bigvar = every variant x dtype of the 256-wide and dynamic-shared
#    geometries on the edge problems (a sample: $BIGVAR_SAMPLE)
verify_label() {  # NAME TIMEOUT REGEX [verify options]
  name=$1 limit=$2 regex=$3; shift 3
  timeout "$limit" python3 -m wgradcache verify --from-cache --cache-dir "$DEVCACHE" \
    --target sm_90 --level numerics --device cuda --no-reproduce --json --label "$regex" \
    "$@" --stream "$OUT/$name.jsonl" > "$OUT/$name.json" 2> "$OUT/$name.txt"
  echo "$name verify exit $?" >> "$OUT/$name.txt"
}
step geo && verify_label geo "${GEO_TIMEOUT:-400}" 'fp16-.*-sync-default-none$'
step asyncl && verify_label asyncl "${ASYNC_TIMEOUT:-150}" 'fp16-.*-async-default-none$'
# shellcheck disable=SC2046
step bigvar && verify_label bigvar "${BIGVAR_TIMEOUT:-300}" \
  't(128x256x32-w2x4|256x128x32-w4x2|64x256x32-w1x4|256x64x32-w4x1|128x128x32-w2x2|128x128x64-w4x2)-' \
  --sample "${BIGVAR_SAMPLE:-0.5}" $(edge_args)
#    the deeper rings and the depthwise kernels of the full cache: ringl = every -s3/-s4
#    kernel (a sample: $RINGL_SAMPLE) with the default problems (split degrees 1, 2, 3, 7,
#    an empty last slice); dw = every depthwise kernel on its own probes and on the edge
#    problems of its filters ($DW_PROBLEMS: 5x5 and 7x7, stride 2, partial channel blocks)
step ringl && verify_label ringl "${RING_TIMEOUT:-200}" '-s[34]$' --sample "${RINGL_SAMPLE:-0.3}"
DW_PROBLEMS=${DW_PROBLEMS:-"1,34,9,9,34,5,5,1,2,1,34 2,70,11,11,70,7,7,2,3,1,70
  1,18,7,7,18,3,3,2,1,1,18 3,132,13,13,132,3,3,1,1,1,132 2,33,8,8,33,3,3,1,1,1,33"}
# shellcheck disable=SC2046
step dw && verify_label dw "${DW_TIMEOUT:-150}" '-depthwise-' \
  $(for p in $DW_PROBLEMS; do printf ' --problem %s' "$p"; done)
# 5. where the time goes: Nsight Compute on select's pick for one layer, when ncu is there
#    ($NCU_ARGS: device_speed.py's choice of kernel, default select's pick; --clock-control
#    none: METHOD.md says to leave the clocks alone)
if step ncu && command -v ncu >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:^wgrad_ \
    --launch-skip 3 --launch-count "${NCU_COUNT:-1}" --section SchedulerStats \
    --section InstructionStats \
    --section SpeedOfLight --section WarpStateStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" python3 benchmarks/device_speed.py \
    --cache-dir "$DEVCACHE" --layer "${NCU_LAYER:-resnet50/l3.conv2}" --dtype fp16 ${NCU_ARGS:---top 1} \
    --spin 0 --warmup 3 --iters 1 --out /tmp/ncu-speed.json > "$OUT/ncu.txt" 2>&1
  echo "ncu exit $?" >> "$OUT/ncu.txt"
fi
# 6. tune (issue 33): time every serving kernel of layers/reference.yaml per dtype into the
#    cache's timings, resumable ($TUNE_SECONDS per call; run the same call again to go on);
#    the timings folder comes back as timings.tar.xz, tune's rows as tune.json
if step tune; then
  # shellcheck disable=SC2086
  timeout "${TUNE_TIMEOUT:-560}" python3 -m wgradcache tune --target sm_90 \
    --layers layers/reference.yaml ${TUNE_ARGS:---dtype fp16 --all} \
    --max-seconds "${TUNE_SECONDS:-420}" --cache-dir "$DEVCACHE" --json \
    > "$OUT/tune.json" 2> "$OUT/tune.txt"
  echo "tune exit $?" >> "$OUT/tune.txt"
  tar -cJf "$OUT/timings.tar.xz" -C "$DEVCACHE/sm_90" timings
fi
tail -n 5 "$OUT/planted.txt" "$OUT/pergeo.txt" "$OUT/asyncgeo.txt" "$OUT/asyncvar.txt" 2>/dev/null
tail -n 12 "$OUT/verify.txt" "$OUT/speed.txt" "$OUT/tune.txt" "$OUT/ncu.txt" 2>/dev/null
[ $rc -ne 0 ] && exit $rc
exit $rc2
