#!/bin/sh
# Nsight Compute on the kernel select picks (the measured best) for a few large layers, to
# say what bounds them: devcache/sm90-tuned.tar.xz (the whole sm_90 walk with the H100's
# graph-timed rows of 12-07), one `tune --top 1 --remeasure` a layer under ncu, the first
# launch of our kernel profiled (speed of light, memory and compute workload, warp states,
# scheduler, occupancy). ncu-LAYER.txt in $OUT. LAYERS: names of layers/reference.yaml.
. benchmarks/device_env.sh
unpack tuned sm90-tuned
for l in ${LAYERS:-vgg16/conv3_x resnet50/l3.conv2 resnet50/l4.conv1 unet/bottleneck}; do
  f=$OUT/ncu-$(echo $l | tr '/.' '--').txt
  timeout ${NCU_TIMEOUT:-150} ncu --target-processes all -k 'regex:^wgrad_sm_90' --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml --dtype fp16 \
    --layer $l --top 1 --iters 1 --batch 1 --warmup 0 --spin 0 --remeasure \
    --cache-dir /tmp/tuned/cache > $f 2>&1
  echo "ncu exit $?" >> $f; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|No Eligible" $f | head -8
done
ls -la $OUT
