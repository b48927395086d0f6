# Sourced first by the one-call device scripts (`. benchmarks/device_env.sh`, $OUT set): the
# carried wheels (.whl/, the device README's way) installed once into /tmp/site, PYTHONPATH
# on them and this tree's src/, CUDA's tools on PATH, the card and its clocks in
# $OUT/env.txt, `unpack NAME TARBALL`: devcache/TARBALL.tar.xz into /tmp/NAME once (a
# warm machine keeps it), exit 3 when it cannot be, and `dw_speed REGEX N`: the eight
# depthwise layers against cuDNN per dtype of $DTYPES on the cache $D, select's top 6 plus
# up to N best-ranked kernels matching REGEX, with $SWEEP (degrees) the best split-K
# kernel's sweep (speed-DTYPE.txt/json in $OUT).
unpack() {
  [ -d "/tmp/$1/cache" ] || { mkdir -p "/tmp/$1" && tar -xJf "devcache/$2.tar.xz" -C "/tmp/$1"; } || exit 3
}
dw_speed() {
  for dt in ${DTYPES:-fp16 bf16}; do
    timeout ${SPEED_TIMEOUT:-90} python3 benchmarks/device_speed.py --cache-dir $D --dtype $dt \
      --top 6 --include="$1" --include-top $2 --prefix '' --layer mobilenetv2/dw112 \
      --layer mobilenetv2/dw112.s2 --layer mobilenetv2/dw56 --layer mobilenetv2/dw28 \
      --layer mobilenetv2/dw14 --layer mobilenetv2/dw7 --layer efficientnetb0/dw5x5.28 \
      --layer efficientnetb0/dw5x5.14 --spin ${SPIN:-5} ${SWEEP:+--sweep $SWEEP} \
      --out $OUT/speed-$dt.json \
      > $OUT/speed-$dt.txt 2>&1
    tail -n 12 $OUT/speed-$dt.txt
  done
}
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -d "$d" ] && PATH=$PATH:$d; done; export PATH
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } > $OUT/env.txt 2>&1
