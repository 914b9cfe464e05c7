<?php

declare(strict_types=1);

// Hands a planned list of jobs to the daemon with the acked Client (spool fallback on), one after
// the other with the planned pauses, while test/reliability.crash.test.js kills and restarts the
// daemon. Prints one JSON line per job: {"i", "id", "ms", "spooled"} or {"i", "error"}.
//
//   php php-handoff.php PLAN.json
//   PLAN: {"client": {"socket": "…"} | {"host": "127.0.0.1", "port": N}, "spool": DIR,
//          "jobs": [{"direction", "target", "local", "remote", "sha256", "delayMs"}, …]}

require __DIR__ . '/../../php-client/tests/bootstrap.php';

use TransferSidecar\Client;

$plan = json_decode((string) file_get_contents($argv[1] ?? ''), true, 512, JSON_THROW_ON_ERROR);
$client = new Client($plan['client'] + ['spool' => $plan['spool'], 'connect_timeout' => 2.0, 'read_timeout' => 30.0]);
foreach ($plan['jobs'] as $i => $job) {
    usleep((int) ($job['delayMs'] * 1000));
    $options = ['overwrite' => false, 'sha256' => $job['sha256']];
    try {
        $id = $job['direction'] === 'upload'
            ? $client->upload($job['target'], $job['local'], $job['remote'], $options)
            : $client->download($job['target'], $job['local'], $job['remote'], $options);
        // The client returns the id either way; a file still in the spool means the daemon could
        // not take it (it ingests the file only once it is back).
        $spooled = is_file($plan['spool'] . '/' . $id . '.json');
        echo json_encode(['i' => $i, 'id' => $id, 'ms' => $client->lastHandoffSeconds() * 1000, 'spooled' => $spooled]), "\n";
    } catch (\Throwable $e) {
        echo json_encode(['i' => $i, 'error' => get_class($e) . ': ' . $e->getMessage()]), "\n";
    }
}
