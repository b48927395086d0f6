#!/bin/sh
# The wide-vector depthwise kernels (5x5 at 4-channel vectors, 3x3 at 8-channel ones) and
# more graph-timed rows, on the whole sm_90 walk (devcache/sm90-full.tar.xz: the walk of
# this commit, built here: the 12-07 rows are of another build's blobs). $STEPS, in order:
#   dw    numerics of devcache/dwnew.tar.xz's 24 new sm_90 entries (verify --device cuda),
#         then the eight depthwise layers against cuDNN per dtype: select's top 6 plus
#         the 12 best-ranked wide-vector kernels (speed-DTYPE.txt/json);
#   tune  tune by graph replay over layers/reference.yaml, each dtype of $TUNE_DTYPES
#         (select's top $TUNE_TOP a layer); a stopped run resumes (tune-DTYPE.txt/json);
#   runs  the depthwise kernels with runs of output columns (devcache/dwruns.tar.xz, 36
#         sm_90 entries): their numerics, then the depthwise layers against cuDNN on
#         devcache/sm90-tuned.tar.xz (the walk with this session's tune rows, so select's
#         top 6 are the measured best) with the 12 best-ranked run kernels beside them.
# Run from the repo root with $OUT set, .whl carried.
. benchmarks/device_env.sh
case " ${STEPS:-dw} " in *" runs "*) unpack tuned sm90-tuned; D=/tmp/tuned/cache ;;
  *) unpack full sm90-full; D=/tmp/full/cache ;; esac
for step in ${STEPS:-dw}; do
case $step in
dw)
  unpack dwnew dwnew
  timeout ${VERIFY_TIMEOUT:-100} python3 -m wgradcache verify --from-cache --cache-dir \
    /tmp/dwnew/cache --target sm_90 --level numerics --device cuda --no-reproduce \
    > $OUT/verify.txt 2>&1
  echo "verify exit $?" >> $OUT/verify.txt; tail -n 2 $OUT/verify.txt
  DTYPES=${DTYPES:-fp16 bf16} dw_speed 't5x[0-9]+x[0-9]+-w4x1-v4x4-depthwise|v8x8-depthwise' 12
  ;;
runs)
  unpack dwruns dwruns
  timeout ${VERIFY_TIMEOUT:-120} python3 -m wgradcache verify --from-cache --cache-dir \
    /tmp/dwruns/cache --target sm_90 --level numerics --device cuda --no-reproduce \
    > $OUT/verify-runs.txt 2>&1
  echo "verify exit $?" >> $OUT/verify-runs.txt; tail -n 2 $OUT/verify-runs.txt
  cp -rn /tmp/dwruns/cache/sm_90/entries/. $D/sm_90/entries/
  cp -rn /tmp/dwruns/cache/sm_90/blobs/. $D/sm_90/blobs/
  DTYPES=${DTYPES:-fp16 bf16} dw_speed '-r[24]$' 12
  ;;
tune)
  for dt in ${TUNE_DTYPES:-fp16 bf16}; do
    timeout ${TUNE_TIMEOUT:-280} python3 -m wgradcache tune --target sm_90 --layers \
      layers/reference.yaml --dtype $dt --top ${TUNE_TOP:-40} --spin 5 \
      --max-seconds ${TUNE_SECONDS:-240} --cache-dir $D --json > $OUT/tune-$dt.json \
      2> $OUT/tune-$dt.txt
    echo "tune exit $?" >> $OUT/tune-$dt.txt; tail -n 3 $OUT/tune-$dt.txt
  done
  ;;
esac
done
xz -9 $OUT/*.json; ls -la $OUT
