<?php

declare(strict_types=1);

// A burst of acked hand-offs from one PHP process: upload() of the same small file to --count
// distinct remote names, back to back on one kept-alive Client, as test/reliability.load.test.js
// runs it in several processes at once. Writes every id the client returned (one per line) to
// --ids and every hand-off time in µs (one per line) to --times; prints a JSON summary.
//
//   php php-burst.php --socket=PATH --target=NAME --local=FILE --prefix=/burst/0 --count=N \
//       --ids=FILE --times=FILE [--spool=DIR]

require __DIR__ . '/../../php-client/tests/bootstrap.php';

use TransferSidecar\Client;
use TransferSidecar\Exception\SidecarException;

$o = getopt('', ['socket:', 'target:', 'local:', 'prefix:', 'count:', 'ids:', 'times:', 'spool:']);
foreach (['socket', 'target', 'local', 'prefix', 'count', 'ids', 'times'] as $required) {
    if (!isset($o[$required])) {
        fwrite(STDERR, "php-burst.php: --$required is required\n");
        exit(2);
    }
}
$client = new Client(['socket' => $o['socket'], 'read_timeout' => 60.0] + (isset($o['spool']) ? ['spool' => $o['spool']] : []));
$count = (int) $o['count'];
$ids = [];
$times = [];
$errors = [];
$started = hrtime(true);
for ($i = 0; $i < $count; $i++) {
    try {
        $ids[] = $client->upload($o['target'], $o['local'], sprintf('%s/%03d/%d.txt', $o['prefix'], $i % 256, $i));
    } catch (SidecarException $e) {
        if (count($errors) < 20) {
            $errors[] = get_class($e) . ': ' . $e->getMessage();
        }
    }
    $times[] = (int) round($client->lastHandoffSeconds() * 1e6);
}
$wall = (hrtime(true) - $started) / 1e9;
file_put_contents($o['ids'], implode("\n", $ids) . "\n");
file_put_contents($o['times'], implode("\n", $times) . "\n");
echo json_encode(['count' => $count, 'acked' => count($ids), 'errors' => $errors, 'seconds' => $wall, 'peakMemory' => memory_get_peak_usage(true)]), "\n";
