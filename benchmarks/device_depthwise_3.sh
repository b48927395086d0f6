#!/bin/sh
# The depthwise two-stage kernels (16-bit dW, f32 workspace, stage 2) on silicon:
# numerics of devcache/dwts.tar.xz's 24 sm_90 entries, then the depthwise layers against
# cuDNN in bf16 (and fp16) with every depthwise entry of dw, dw2 and dwts added to the full
# walk: select's top 6 plus the 12 best-ranked two-stage kernels a layer, and the 8
# best-ranked atomic ones beside them in the same run. SWEEP=D,D,...: each layer's best
# split-K kernel at those degrees too; VERIFY_TIMEOUT=0 skips the numerics.
. benchmarks/device_env.sh
unpack dc sm90-new
unpack dw dw
unpack dw2 dw2
unpack ts dwts
export D=/tmp/dc/cache
[ "${VERIFY_TIMEOUT:-80}" = 0 ] || timeout ${VERIFY_TIMEOUT:-80} python3 -m wgradcache verify --from-cache --cache-dir /tmp/ts/cache \
  --target sm_90 --level numerics --device cuda --no-reproduce > $OUT/verify.txt 2>&1
echo "verify exit $?" >> $OUT/verify.txt; tail -n 2 $OUT/verify.txt
for c in dw dw2 ts; do
  cp -rn /tmp/$c/cache/sm_90/entries/. $D/sm_90/entries/ && cp -rn /tmp/$c/cache/sm_90/blobs/. $D/sm_90/blobs/
done 2>/dev/null
DTYPES=${DTYPES:-bf16 fp16} dw_speed 'depthwise-default-(two_stage|atomic)' 20
xz -9 $OUT/*.json; ls -la $OUT
