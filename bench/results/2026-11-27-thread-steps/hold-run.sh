#!/bin/bash
# Runs a daemon of a checkout with probe-hold.patch applied (here /tmp/wt2): SIDECAR_HOLD=1 leaves every
# job queued, SIDECAR_NOADOPT=1 posts no job to the main thread.
# usage: run.sh HOLD(0|1) -> prints median us of 2000 b2b acked hand-offs on the thread socket
set -e
D=$(mktemp -d /tmp/hold/d-XXXX)
mkdir -p $D/files $D/store
head -c 4096 /dev/urandom > $D/files/f.bin
cat > $D/config.json <<J
{"listen":["unix:$D/api.sock"],"stateDir":"$D/state","roots":["$D/files"],"logLevel":"warn","journal":{"sync":"write"},
 "queue":{"limit":100000},"handoff":{"listen":["unix:$D/h.sock"]},"targets":{"local":{"type":"file","dir":"$D/store"}}}
J
if [ "$1" = 1 ]; then export SIDECAR_HOLD=1; fi
SIDECAR_CONFIG=$D/config.json node --max-semi-space-size=8 --heap-growing-percent=50 /tmp/wt2/bin/transfer-sidecar.js > $D/log 2>&1 &
P=$!
for i in $(seq 1 100); do [ -S $D/h.sock ] && break; sleep 0.1; done
php -r '
require "/work/main/php-client/tests/bootstrap.php";
$c = new TransferSidecar\Client(["socket" => $argv[1], "handoff_socket" => $argv[2]]);
foreach ([300, 2000] as $n) { $t = [];
for ($i = 0; $i < $n; $i++) { $t0 = hrtime(true); $c->upload("local", $argv[3], "/x-$n-$i.bin"); $t[] = (hrtime(true) - $t0) / 1000; }
sort($t); }
printf("median %.1f us p90 %.1f\n", $t[intdiv(count($t), 2)], $t[intdiv(count($t) * 9, 10)]);
' $D/api.sock $D/h.sock $D/files/f.bin
kill $P; wait $P 2>/dev/null || true
rm -rf $D
