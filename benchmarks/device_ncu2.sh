#!/bin/sh
# Why vgg16/conv3_x's best kernels all sit at 222-249 us: Nsight Compute on three of them
# (async w2x4 g8, sync w4x1, sync 128x256 w4x2 g8) within one `tune --top 40 --remeasure`
# of the layer (devcache/sm90-tuned.tar.xz), each profiled three ways: the tables
# (shared-memory wavefronts and bank conflicts, instruction mix, warp states), the same
# with --print-details all (the stall reasons), and the two bank-conflict counters.
# $NCU_CACHE: the tarball under devcache/ (default sm90-tuned; sm90-aorder: the kernels
# with A read in the MMA's register order, whose top 40 the fit ranks).
. benchmarks/device_env.sh
C=${NCU_CACHE:-sm90-tuned}
unpack $C $C
T="python3 -m wgradcache tune --target sm_90 --layers layers/reference.yaml --dtype fp16 \
  --layer vgg16/conv3_x --top 40 --iters 1 --batch 1 --warmup 0 --spin 0 --remeasure \
  --cache-dir /tmp/$C/cache"
S="--section MemoryWorkloadAnalysis_Tables --section InstructionStats --section WarpStateStats \
  --section SourceCounters --section SpeedOfLight"
for k in t128x128x32_w2x4_c16x16_async_default_atomic_g8 t128x128x32_w4x1_v8x8_sync_default_atomic \
    t128x256x32_w4x2_v8x8_sync_default_atomic_g8; do
  f=$OUT/ncu2-$k.txt
  K="-k regex:^wgrad_sm_90_fp16_${k}\$ --launch-count 1 --target-processes all"
  { echo "== tables"; timeout 120 ncu $K $S $T 2>&1 | sed -n '/==PROF== Profiling/,$p';
    echo "== details"; timeout 120 ncu $K --section WarpStateStats --print-details all $T 2>&1 \
      | sed -n '/==PROF== Profiling/,$p';
    echo "== counters"; timeout 120 ncu $K --metrics \
      l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum \
      $T 2>&1 | sed -n '/==PROF== Profiling/,$p'; } > $f
  grep -c . $f
done
ls -la $OUT
