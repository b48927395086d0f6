#!/bin/sh
# One device call for sm_90's A fragments read in the MMA's register order (2026-12-08):
# the same kernels from the cache before (devcache/sm90-tuned.tar.xz: the whole walk with
# the H100 class's tune rows, which pick them) and after (devcache/sm90-aorder.tar.xz: the
# whole walk rebuilt) timed in one run, interleaved (paired_caches.py: ResNet-50 fp16 and
# bf16, VGG-16 and U-Net fp16), then the after kernels' numerics on silicon: a sample of
# the whole walk ($VERIFY_SAMPLE) at verify's problems. Writes into $OUT (the pairs' JSON
# packed into one file: the device tool brings back 8 at most).
. benchmarks/device_env.sh
unpack before sm90-tuned
unpack after sm90-aorder
for spec in "fp16 resnet50/ 110" "bf16 resnet50/ 110" "fp16 vgg16/ 50" "fp16 unet/ 50"; do
  set -- $spec
  timeout $3 python3 benchmarks/paired_caches.py --before /tmp/before/cache \
    --after /tmp/after/cache --dtype $1 --prefix $2 --spin ${SPIN:-5} \
    --out $OUT/paired-$1-${2%/}.json > $OUT/paired-$1-${2%/}.txt 2>&1
  tail -n 3 $OUT/paired-$1-${2%/}.txt
done
timeout ${VERIFY_TIMEOUT:-150} python3 -m wgradcache verify --from-cache --cache-dir \
  /tmp/after/cache --target sm_90 --level numerics --device cuda --no-reproduce \
  --sample ${VERIFY_SAMPLE:-0.03} > $OUT/verify.txt 2>&1
echo "verify exit $?" >> $OUT/verify.txt; tail -n 3 $OUT/verify.txt
cd $OUT && tar -cJf paired.tar.xz paired-*.json && rm -f paired-*.json; ls -la $OUT
