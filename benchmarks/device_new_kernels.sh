#!/bin/sh
# One device call for the kernels the tenth session added, on the full sm_90 walk carried as
# devcache/sm90-new.tar.xz (the new-walk cache, with the tune timings imported): the planted
# off-by-one, the -s3/-s4 rings and the depthwise kernels on silicon (device_run.sh ringl, dw),
# ResNet-50 fp16 speed with the rings timed beside select's top 12, and the depthwise layers
# against cuDNN. Writes into $OUT.
mkdir -p /tmp/dc && tar -xJf devcache/sm90-new.tar.xz -C /tmp/dc || exit 3
export DEVCACHE=/tmp/dc/cache
STEPS="planted ringl dw speed" RING_TIMEOUT=120 DW_TIMEOUT=60 SPEED_TIMEOUT=230 \
  SPEED_ARGS='--dtype fp16 --include=-s[34]$ --include-top 4' OUT=$OUT sh benchmarks/device_run.sh
PYTHONPATH=/tmp/site:$PWD/src timeout 100 python3 benchmarks/device_speed.py --cache-dir $DEVCACHE \
  --dtype fp16 --top 6 --include=depthwise --include-top 4 --prefix '' --layer mobilenetv2/dw112 \
  --layer mobilenetv2/dw112.s2 --layer mobilenetv2/dw56 --layer mobilenetv2/dw28 \
  --layer mobilenetv2/dw14 --layer mobilenetv2/dw7 --layer efficientnetb0/dw5x5.28 \
  --out $OUT/speed-dw.json > $OUT/speed-dw.txt 2>&1; tail -n 15 $OUT/speed-dw.txt
ls -la "$OUT"
