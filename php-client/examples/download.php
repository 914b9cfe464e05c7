<?php

declare(strict_types=1);

// Streams the file of a finished upload job back to the browser: download.php?id=<job id>
// Only files of jobs the daemon knows can be fetched (never an arbitrary path). Range requests
// pass through. With SIDECAR_ACCEL_PREFIX set (e.g. /sidecar-stream, an nginx `internal`
// location proxying to the daemon's /v1/stream/), nginx serves the file and PHP returns at once.

use TransferSidecar\Client;
use TransferSidecar\Exception\JobNotFoundException;
use TransferSidecar\Exception\SidecarException;
use TransferSidecar\JobId;

$makeClient = require __DIR__ . '/bootstrap.php';

$id = is_string($_GET['id'] ?? null) ? $_GET['id'] : '';
if (!JobId::isValid($id)) {
    http_response_code(400);
    echo "give the job id as ?id=...\n";
    return;
}
$client = $makeClient();
try {
    $job = $client->status($id);
} catch (JobNotFoundException) {
    http_response_code(404);
    echo "no such job\n";
    return;
} catch (SidecarException $e) {
    error_log('transfer-sidecar: ' . $e->getMessage());
    http_response_code(503);
    echo "the transfer service is unavailable\n";
    return;
}
if ($job['direction'] !== 'upload' || $job['state'] !== 'succeeded') {
    http_response_code(409);
    echo "the file is not stored (yet)\n";
    return;
}

header('Content-Disposition: attachment; filename="' . preg_replace('/[^A-Za-z0-9._-]/', '_', basename($job['remote'])) . '"');
$accel = getenv('SIDECAR_ACCEL_PREFIX');
if (is_string($accel) && $accel !== '') {
    header(Client::accelRedirectHeader($job['target'], $job['remote'], $accel));
    return;
}
$range = $_SERVER['HTTP_RANGE'] ?? null;
$client->passthru($job['target'], $job['remote'], is_string($range) && preg_match('/^bytes=[0-9, -]{1,200}$/D', $range) === 1 ? $range : null);
