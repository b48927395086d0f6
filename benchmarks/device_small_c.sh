#!/bin/sh
# One device call for the small-C first-layer kernels (issue 32 item 4): numerics of every
# sm_90 small_c entry of devcache/smallc.tar.xz on its probes (split degrees among them), then
# the stems against cuDNN with those entries added to the full walk devcache/sm90-new.tar.xz
# (select's top 6 plus the 6 best-ranked small_c kernels a layer), fp16 and bf16.
. benchmarks/device_env.sh
unpack dc sm90-new
unpack sc smallc
export D=/tmp/dc/cache
timeout ${VERIFY_TIMEOUT:-150} python3 -m wgradcache verify --from-cache --cache-dir /tmp/sc/cache \
  --target sm_90 --level numerics --device cuda --no-reproduce --json > $OUT/verify.json 2> $OUT/verify.txt
echo "verify exit $?" >> $OUT/verify.txt; tail -n 5 $OUT/verify.txt
cp -n /tmp/sc/cache/sm_90/entries/* $D/sm_90/entries/ && cp -n /tmp/sc/cache/sm_90/blobs/* $D/sm_90/blobs/
for dt in fp16 bf16; do
  timeout ${SPEED_TIMEOUT:-150} python3 benchmarks/device_speed.py --cache-dir $D --dtype $dt --top 6 \
    --include=small_c --include-top 6 --prefix '' --layer mobilenetv2/stem --layer unet/in.stem \
    --layer resnet50/conv1 --spin ${SPIN:-10} --out $OUT/speed-$dt.json > $OUT/speed-$dt.txt 2>&1
  tail -n 5 $OUT/speed-$dt.txt
done
xz -9 $OUT/*.json; ls -la $OUT
