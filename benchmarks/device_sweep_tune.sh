#!/bin/sh
# One device call (issue 32 item 5, issue 33): the split degree swept for each ResNet-50 layer's
# best split-K kernel (fp16; device_speed.py adds the policy's own degree), then tune rows at
# the policy's degrees for select's measured ranking ($TUNE_ARGS, default bf16 --top 30 over
# resnet50), and the first layers (C <= 4) with $STEM=1. Carries the full sm_90 walk
# devcache/sm90-new.tar.xz and .whl/ (the device README's way); $OUT holds at most 8 files.
. benchmarks/device_env.sh
unpack dc sm90-new
export D=/tmp/dc/cache
timeout ${SWEEP_TIMEOUT:-250} python3 benchmarks/device_speed.py --cache-dir $D --dtype fp16 --top 4 \
  --sweep ${SWEEP:-1,2,3,4,7,8,16,32,64,128} --out $OUT/sweep.json > $OUT/sweep.txt 2>&1
tail -n 4 $OUT/sweep.txt
if [ "${STEM:-0}" = 1 ]; then
  timeout ${STEM_TIMEOUT:-90} python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml \
    --dtype fp16 --top 12 --layer mobilenetv2/stem --layer unet/in.stem --layer resnet50/conv1 \
    --spin 5 --cache-dir $D --json > $OUT/tune-stem.json 2> $OUT/tune-stem.txt
fi
# shellcheck disable=SC2086
timeout ${TUNE_TIMEOUT:-220} python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml \
  ${TUNE_ARGS:---dtype bf16 --top 30 --network resnet50} --spin 5 --max-seconds ${TUNE_SECONDS:-190} \
  --cache-dir $D --json > $OUT/tune.json 2> $OUT/tune.txt
echo "tune exit $?" >> $OUT/tune.txt; tail -n 3 $OUT/tune-stem.txt $OUT/tune.txt 2>/dev/null
xz -9 $OUT/*.json; ls -la $OUT
