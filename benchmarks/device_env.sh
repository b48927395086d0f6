# Sourced first by the one-call device scripts (`. benchmarks/device_env.sh`, $OUT set): the
# carried wheels (.whl/, the device README's way) installed once into /tmp/site, PYTHONPATH
# on them and this tree's src/, CUDA's tools on PATH, the card and its clocks in
# $OUT/env.txt, and `unpack NAME TARBALL`: devcache/TARBALL.tar.xz into /tmp/NAME once (a
# warm machine keeps it), exit 3 when it cannot be.
unpack() {
  [ -d "/tmp/$1/cache" ] || { mkdir -p "/tmp/$1" && tar -xJf "devcache/$2.tar.xz" -C "/tmp/$1"; } || exit 3
}
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -d "$d" ] && PATH=$PATH:$d; done; export PATH
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } > $OUT/env.txt 2>&1
