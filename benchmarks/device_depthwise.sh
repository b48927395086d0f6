#!/bin/sh
# One device call (issue 32 item 4, issue 33): numerics of the depthwise entries of
# devcache/dw.tar.xz (the 256-thread ones: 8-32 positions a CTA step), the depthwise layers
# against cuDNN with them added to the full walk devcache/sm90-new.tar.xz (select's top 6
# plus the 12 best-ranked depthwise kernels a layer), then tune rows of the networks other
# than ResNet-50/ResNeXt-50 ($TUNE_ARGS, default fp16 --top 40) on top of the rows so far
# (devcache/timings-h100.json.xz), for select's held-out figures. $OUT: at most 8 files.
. benchmarks/device_env.sh
unpack dc sm90-new
unpack dw dw
export D=/tmp/dc/cache
mkdir -p $D/sm_90/timings && xz -dc devcache/timings-h100.json.xz > $D/sm_90/timings/nvidia-h100-80gb-hbm3-2ad914e14e56.json
timeout ${VERIFY_TIMEOUT:-120} python3 -m wgradcache verify --from-cache --cache-dir /tmp/dw/cache \
  --target sm_90 --level numerics --device cuda --no-reproduce --label depthwise --json \
  > $OUT/verify.json 2> $OUT/verify.txt
echo "verify exit $?" >> $OUT/verify.txt; tail -n 3 $OUT/verify.txt
cp -n /tmp/dw/cache/sm_90/entries/* $D/sm_90/entries/ && cp -n /tmp/dw/cache/sm_90/blobs/* $D/sm_90/blobs/
timeout ${SPEED_TIMEOUT:-150} python3 benchmarks/device_speed.py --cache-dir $D --dtype fp16 --top 6 \
  --include=depthwise --include-top 12 --prefix '' --layer mobilenetv2/dw112 \
  --layer mobilenetv2/dw112.s2 --layer mobilenetv2/dw56 --layer mobilenetv2/dw28 \
  --layer mobilenetv2/dw14 --layer mobilenetv2/dw7 --layer efficientnetb0/dw5x5.28 \
  --layer efficientnetb0/dw5x5.14 --spin ${SPIN:-10} --out $OUT/speed-dw.json > $OUT/speed-dw.txt 2>&1
tail -n 12 $OUT/speed-dw.txt
# shellcheck disable=SC2086
timeout ${TUNE_TIMEOUT:-240} python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml \
  ${TUNE_ARGS:---dtype fp16 --top 40 --network mobilenetv2 --network efficientnetb0 --network unet --network vgg16 --network deeplabv3} \
  --spin 5 --max-seconds ${TUNE_SECONDS:-210} --cache-dir $D --json > $OUT/tune.json 2> $OUT/tune.txt
echo "tune exit $?" >> $OUT/tune.txt; tail -n 3 $OUT/tune.txt
xz -9 $OUT/*.json; ls -la $OUT
