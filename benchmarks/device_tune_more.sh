#!/bin/sh
# A second tune of the networks ResNet-50 / ResNeXt-50's rows leave out (issue 33's held-out
# figure), deeper than the first call's top 40: devcache/ho.tar.xz is the before cache with
# that call's rows imported; rows it has are skipped, so this adds select's ranks 41..TOP
# (the ranking now that the fit has those rows). Writes $OUT/tune-more.json.
. benchmarks/device_env.sh
unpack ho ho
timeout ${TUNE_TIMEOUT:-500} python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml \
  --dtype fp16 --top ${TOP:-120} --network vgg16 --network unet --network deeplabv3 \
  --layer mobilenetv2/pw56.expand --layer mobilenetv2/pw28.project \
  --layer mobilenetv2/pw14.expand --layer mobilenetv2/pw7.head --spin 10 \
  --max-seconds ${TUNE_SECONDS:-440} --cache-dir /tmp/ho/cache --json \
  > $OUT/tune-more.json 2> $OUT/tune-more.txt
echo "tune exit $?" >> $OUT/tune-more.txt; tail -n 3 $OUT/tune-more.txt
xz -9 $OUT/*.json; ls -la $OUT
