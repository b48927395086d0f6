#!/bin/sh
# Device calls for sm_90's A fragments read in the MMA's register order (2026-12-08), on
# the cache before (devcache/sm90-tuned.tar.xz: the whole walk with the H100 class's tune
# rows, which pick the kernels) and after (devcache/sm90-aorder.tar.xz: the whole walk
# rebuilt). $STEPS, in order (default "paired verify"):
#   paired  the same kernels from both caches timed in one run, interleaved, cuDNN beside
#           (paired_caches.py: ResNet-50 fp16 and bf16, VGG-16 and U-Net fp16);
#   verify  the after kernels' numerics on silicon: a sample ($VERIFY_SAMPLE) of the walk;
#   tune    tune rows of the after cache by graph replay over layers/reference.yaml (its
#           fit ranks select's top $TUNE_TOP a layer), each dtype of $TUNE_DTYPES.
# Writes into $OUT (the pairs' JSON packed into one file: the device tool brings back 8
# files at most).
# The tarballs are built here, not committed: sm90-tuned = a full sm_90 build of the
# commit before the change (e5b977d: `wgradcache build --target sm_90 --cache-dir D`) with
# results/sm90-h100-2026-12-07h-wide-dw/tune-{fp16,bf16}.json.xz imported (unxz, then
# `wgradcache tune --target sm_90 --import FILE --cache-dir D`), packed as
# `tar -C <parent of D, D named cache> -cJf devcache/sm90-tuned.tar.xz cache`;
# sm90-aorder = a full build of this commit, packed the same way (no tune rows needed).
. benchmarks/device_env.sh
unpack after sm90-aorder
for step in ${STEPS:-paired verify}; do
case $step in
paired)
  unpack before sm90-tuned
  for spec in "fp16 resnet50/ 110" "bf16 resnet50/ 110" "fp16 vgg16/ 50" "fp16 unet/ 50"; do
    set -- $spec
    timeout $3 python3 benchmarks/paired_caches.py --before /tmp/before/cache \
      --after /tmp/after/cache --dtype $1 --prefix $2 --spin ${SPIN:-5} \
      --out $OUT/paired-$1-${2%/}.json > $OUT/paired-$1-${2%/}.txt 2>&1
    tail -n 3 $OUT/paired-$1-${2%/}.txt
  done
  (cd $OUT && tar -cJf paired.tar.xz paired-*.json && rm -f paired-*.json)
  ;;
verify)
  timeout ${VERIFY_TIMEOUT:-150} python3 -m wgradcache verify --from-cache --cache-dir \
    /tmp/after/cache --target sm_90 --level numerics --device cuda --no-reproduce \
    --sample ${VERIFY_SAMPLE:-0.03} > $OUT/verify.txt 2>&1
  echo "verify exit $?" >> $OUT/verify.txt; tail -n 3 $OUT/verify.txt
  ;;
tune)
  for dt in ${TUNE_DTYPES:-fp16 bf16}; do
    timeout ${TUNE_TIMEOUT:-200} python3 -m wgradcache tune --target sm_90 --layers \
      layers/reference.yaml --dtype $dt --top ${TUNE_TOP:-40} --spin 5 \
      --max-seconds ${TUNE_SECONDS:-160} --cache-dir /tmp/after/cache --json \
      > $OUT/tune-$dt.json 2> $OUT/tune-$dt.txt
    echo "tune exit $?" >> $OUT/tune-$dt.txt; tail -n 3 $OUT/tune-$dt.txt
  done
  xz -9 $OUT/tune-*.json
  ;;
esac
done
ls -la $OUT
