#!/bin/sh
# One device call for timing by graph replay (runtime/timing.py, device_speed.py): on the
# whole sm_90 walk with the H100 class's host-timed rows (devcache/ho.tar.xz),
#   1. a smoke tune of one layer (graphs on the driver API and through torch);
#   2. ResNet-50 fp16 against cuDNN, select's top $TOP, timed by graph replay, then the
#      same from the host (--eager), in one run: how much of each side was the host;
#   3. tune by graph replay over layers/reference.yaml, fp16 (and bf16 of ResNet-50),
#      select's top $TUNE_TOP: the rows of a class of its own (the held-out figures).
# Writes into $OUT: env.txt, smoke.txt, speed-graph/eager.{txt,json.xz}, tune.{txt,json.xz}.
. benchmarks/device_env.sh
unpack ho ho
D=/tmp/ho/cache
timeout 60 python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml --dtype fp16 \
  --layer resnet50/l4.conv3 --top 2 --spin 2 --cache-dir $D --json > $OUT/smoke.json 2> $OUT/smoke.txt
echo "smoke exit $?" >> $OUT/smoke.txt; tail -n 3 $OUT/smoke.txt
for how in graph eager; do
  flag=; [ $how = eager ] && flag=--eager
  timeout ${SPEED_TIMEOUT:-150} python3 benchmarks/device_speed.py --cache-dir $D --dtype fp16 \
    --top ${TOP:-6} --spin ${SPIN:-10} $flag --out $OUT/speed-$how.json > $OUT/speed-$how.txt 2>&1
  tail -n 2 $OUT/speed-$how.txt
done
timeout ${TUNE_TIMEOUT:-240} python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml \
  --dtype fp16 --top ${TUNE_TOP:-60} --spin 5 --max-seconds ${TUNE_SECONDS:-200} \
  --cache-dir $D --json > $OUT/tune.json 2> $OUT/tune.txt
echo "tune exit $?" >> $OUT/tune.txt; tail -n 3 $OUT/tune.txt
xz -9 $OUT/*.json; ls -la $OUT
