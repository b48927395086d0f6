#!/bin/sh
# The second depthwise call: numerics of devcache/dw2.tar.xz's entries (64 and 32 positions
# a step with 4-channel vectors, a 5x5 of channel pairs), then the depthwise layers against
# cuDNN in fp16 and bf16 with every depthwise entry of dw.tar.xz and dw2.tar.xz added to the
# full walk (select's top 6 plus the 16 best-ranked depthwise kernels a layer).
. benchmarks/device_env.sh
unpack dc sm90-new
unpack dw dw
unpack dw2 dw2
export D=/tmp/dc/cache
timeout ${VERIFY_TIMEOUT:-60} python3 -m wgradcache verify --from-cache --cache-dir /tmp/dw2/cache \
  --target sm_90 --level numerics --device cuda --no-reproduce --json \
  > $OUT/verify.json 2> $OUT/verify.txt
echo "verify exit $?" >> $OUT/verify.txt; tail -n 2 $OUT/verify.txt
for c in dw dw2; do
  cp -rn /tmp/$c/cache/sm_90/entries/. $D/sm_90/entries/ && cp -rn /tmp/$c/cache/sm_90/blobs/. $D/sm_90/blobs/
done 2>/dev/null
DTYPES=${DTYPES:-fp16 bf16} dw_speed 'depthwise' 16
xz -9 $OUT/*.json; ls -la $OUT
