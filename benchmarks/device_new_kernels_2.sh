#!/bin/sh
# The second call after device_new_kernels.sh: bf16 speed with the rings, the depthwise layers
# against cuDNN, and the first call's fp16 speed files where the warm machine still has them.
[ -d /tmp/dc/cache ] || { mkdir -p /tmp/dc && tar -xJf devcache/sm90-new.tar.xz -C /tmp/dc; } || exit 3
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 D=/tmp/dc/cache
for f in /root/out/speed.json /root/out/speed.txt /root/out/speed-dw.txt; do
  [ -f "$f" ] && cp "$f" "$OUT/prev-$(basename "$f")"; done
timeout 100 python3 benchmarks/device_speed.py --cache-dir $D --dtype fp16 --top 6 \
  --include=depthwise --include-top 4 --prefix '' --layer mobilenetv2/dw112 \
  --layer mobilenetv2/dw112.s2 --layer mobilenetv2/dw56 --layer mobilenetv2/dw28 \
  --layer mobilenetv2/dw14 --layer mobilenetv2/dw7 --layer efficientnetb0/dw5x5.28 \
  --out $OUT/speed-dw.json > $OUT/speed-dw.txt 2>&1; tail -n 14 $OUT/speed-dw.txt
timeout ${BF16_TIMEOUT:-300} python3 benchmarks/device_speed.py --cache-dir $D --dtype bf16 --top 12 \
  --include=-s[34]$ --include-top 4 --out $OUT/speed-bf16.json > $OUT/speed-bf16.txt 2>&1
tail -n 4 $OUT/speed-bf16.txt; ls -la "$OUT"
