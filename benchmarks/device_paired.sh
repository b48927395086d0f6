#!/bin/sh
# One device call for a generator change that alters code objects (here: every kernel
# argument noundef): the same kernels from the cache before (devcache/before-full.tar.xz, the
# whole walk with the H100 class's tune rows) and after (devcache/after147.tar.xz: each
# measured pair's 6 fastest kernels, rebuilt) timed in one run (paired_caches.py, fp16 and
# bf16 ResNet-50, fp16 ResNeXt-50), the after kernels' numerics on silicon, then tune rows
# of the networks the class has none of (the held-out figure of issue 33), on the before
# cache, so they match its rows. Writes into $OUT.
. benchmarks/device_env.sh
unpack before before-full
unpack after after147
for spec in "fp16 resnet50/" "bf16 resnet50/" "fp16 resnext50/"; do
  set -- $spec
  timeout ${PAIR_TIMEOUT:-100} python3 benchmarks/paired_caches.py --before /tmp/before/cache \
    --after /tmp/after/after --dtype $1 --prefix $2 --spin ${SPIN:-10} \
    --out $OUT/paired-$1-${2%/}.json > $OUT/paired-$1-${2%/}.txt 2>&1
  tail -n 1 $OUT/paired-$1-${2%/}.txt
done
timeout ${VERIFY_TIMEOUT:-150} python3 -m wgradcache verify --from-cache --cache-dir /tmp/after/after \
  --target sm_90 --level numerics --device cuda --no-reproduce --json \
  > $OUT/verify.json 2> $OUT/verify.txt
echo "verify exit $?" >> $OUT/verify.txt; tail -n 2 $OUT/verify.txt
timeout ${TUNE_TIMEOUT:-200} python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml \
  --dtype fp16 --top ${TOP:-40} --network vgg16 --network unet --network deeplabv3 \
  --layer mobilenetv2/pw56.expand --layer mobilenetv2/pw28.project \
  --layer mobilenetv2/pw14.expand --layer mobilenetv2/pw7.head --spin 5 \
  --max-seconds ${TUNE_SECONDS:-170} --cache-dir /tmp/before/cache --json \
  > $OUT/tune.json 2> $OUT/tune.txt
echo "tune exit $?" >> $OUT/tune.txt; tail -n 3 $OUT/tune.txt
xz -9 $OUT/*.json; ls -la $OUT
