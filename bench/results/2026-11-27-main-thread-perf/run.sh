#!/bin/bash
# How this directory's runs were made (2026-11-27, on 1be5ec4): the bench's WebHDFS upload of
# 1,000 MiB, 5 runs, one competitor, under `perf record -a -g` (all threads of all processes), then
# analyze.py on the daemon's main thread. Pairs: sidecar (sha256), sidecar-none, twice (a, b).
#   bash run.sh sidecar sidecar-sha256-a OUTDIR
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.." || exit 1
comp=$1; tag=$2; out=${3:-/tmp/main-thread-perf}
mkdir -p "$out"
perf record -a -g -F 299 -o "$out/$tag.data" -- node bench/run.js --large --sections throughput --targets webhdfs --directions upload --sizes 1000 --runs 5 --competitors "$comp" --out "$out/$tag-res" > "$out/$tag.log" 2>&1
perf script -i "$out/$tag.data" -F tid,comm,time,ip,sym > "$out/$tag.txt" 2>/dev/null
pid=$(grep -a -o 'daemon for throughput[^,]*pid [0-9]*' "$out/$tag.log" | grep -o '[0-9]*$')
# 5 × 1,000 MiB timed, and the warm-up's 16 MiB up and 16 MiB down
python3 "$here/analyze.py" "$out/$tag.txt" "$pid" "$(python3 -c 'print(5*1000/1024+2*16/1024)')" > "$out/$tag.analysis.txt"
