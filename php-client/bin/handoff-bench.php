<?php

declare(strict_types=1);

// Hand-off latency of the PHP client against a running daemon, in a burst (calls back to back):
// acked upload() and fire-and-forget send(), over the unix socket and TCP. Afterwards every id is
// looked up on the daemon to count lost jobs.
//
//   php bin/handoff-bench.php --socket=/run/transfer-sidecar/sidecar.sock --port=8765 \
//       --root=/var/www/uploads --target=local [--count=2000] [--token=...]
//
// --root must be inside the daemon's roots; one small file is created there and uploaded
// --count times per variant to distinct remote names under /handoff-bench/.

require __DIR__ . '/../tests/bootstrap.php';

use TransferSidecar\Client;
use TransferSidecar\Exception\JobNotFoundException;
use TransferSidecar\Exception\SidecarException;

$opts = getopt('', ['socket:', 'port:', 'root:', 'target:', 'count:', 'token:', 'only:']);
foreach (['socket', 'port', 'root'] as $required) {
    if (!isset($opts[$required])) {
        fwrite(STDERR, "usage: php handoff-bench.php --socket=PATH --port=N --root=DIR [--target=local] [--count=2000] [--token=T] [--only=acked|send|all]\n");
        exit(2);
    }
}
$count = (int) ($opts['count'] ?? 2000);
$target = $opts['target'] ?? 'local';
$token = $opts['token'] ?? null;
$file = rtrim($opts['root'], '/') . '/handoff-bench-' . bin2hex(random_bytes(4)) . '.txt';
file_put_contents($file, "hand-off benchmark\n");
$run = bin2hex(random_bytes(4));

$transports = [
    'unix' => ['socket' => $opts['socket']],
    'tcp' => ['host' => '127.0.0.1', 'port' => (int) $opts['port']],
];
$only = $opts['only'] ?? 'all';
$variants = [];
foreach ($transports as $transport => $options) {
    foreach (['acked', 'send'] as $mode) {
        if ($only === 'all' || $only === $mode) {
            $variants[] = [$transport, $mode, $options];
        }
    }
}

$checker = new Client($transports['unix'] + ['token' => $token, 'read_timeout' => 60.0]);
printf("%-5s %-6s %6s %9s %9s %9s %8s %8s\n", 'via', 'mode', 'calls', 'median µs', 'p90 µs', 'p99 µs', 'errors', 'lost');
foreach ($variants as [$transport, $mode, $options]) {
    $client = new Client($options + ['token' => $token, 'read_timeout' => 30.0]);
    $times = [];
    $ids = [];
    $errors = 0;
    $started = hrtime(true);
    for ($i = 0; $i < $count; $i++) {
        $remote = sprintf('/handoff-bench/%s/%s-%s/%d.txt', $run, $transport, $mode, $i);
        try {
            $ids[] = $mode === 'acked' ? $client->upload($target, $file, $remote) : $client->send('upload', $target, $file, $remote);
            $times[] = $client->lastHandoffSeconds(); // a call that threw handed nothing off
        } catch (SidecarException $e) {
            $errors++;
        }
    }
    $wall = (hrtime(true) - $started) / 1e9;
    // Lost: an id the client returned (so the caller thinks it was handed over) that the daemon never got.
    usleep(500000);
    $lost = 0;
    foreach ($ids as $id) {
        try {
            $checker->status($id);
        } catch (JobNotFoundException) {
            $lost++;
        }
    }
    sort($times);
    $pct = static fn (float $p): float => $times === [] ? NAN : $times[min(count($times) - 1, (int) floor($p * count($times)))] * 1e6;
    printf("%-5s %-6s %6d %9.1f %9.1f %9.1f %8d %8d   (%.0f calls/s)\n", $transport, $mode, $count, $pct(0.5), $pct(0.9), $pct(0.99), $errors, $lost, $count / $wall);
}
unlink($file);
