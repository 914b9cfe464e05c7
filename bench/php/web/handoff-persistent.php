<?php

declare(strict_types=1);

// handoff.php with the client's `persistent` option: the php-fpm worker keeps its connection to the
// daemon from one request to the next (the line protocol only, so BENCH_PROTOCOL does not apply).
// Served by php-fpm (behind nginx) for bench/lib/web.js; configured by the environment: BENCH_SOCKET,
// BENCH_HANDOFF_SOCKET (the daemon's handoff.listen socket, to hand off there; unset: none),
// BENCH_SIDECAR_TARGET, BENCH_FILE.

require __DIR__ . '/../../../php-client/tests/bootstrap.php';

use TransferSidecar\Client;
use TransferSidecar\Exception\SidecarException;

try {
    $client = new Client(['socket' => getenv('BENCH_SOCKET'), 'handoff_socket' => getenv('BENCH_HANDOFF_SOCKET') ?: null, 'persistent' => true]);
    $id = $client->upload(getenv('BENCH_SIDECAR_TARGET'), getenv('BENCH_FILE'), '/web-handoff-' . bin2hex(random_bytes(8)) . '.bin');
    echo "queued $id\n";
} catch (SidecarException $e) {
    http_response_code(500);
    echo $e->getMessage(), "\n";
}
