<?php

declare(strict_types=1);

// One acked upload() hand-off; prints {"id"} or what the client threw ({"exception", "status",
// "code", "retryAfter"}), so a test can see how PHP meets a full queue.
//
//   php php-one.php --socket=PATH --target=NAME --local=FILE --remote=PATH [--spool=DIR]

require __DIR__ . '/../../php-client/tests/bootstrap.php';

use TransferSidecar\Client;
use TransferSidecar\Exception\UnavailableException;

$o = getopt('', ['socket:', 'target:', 'local:', 'remote:', 'spool:']);
$client = new Client(['socket' => $o['socket']] + (isset($o['spool']) ? ['spool' => $o['spool']] : []));
try {
    echo json_encode(['id' => $client->upload($o['target'], $o['local'], $o['remote'])]), "\n";
} catch (UnavailableException $e) {
    echo json_encode(['exception' => 'UnavailableException', 'status' => $e->getStatus(), 'code' => $e->getErrorCode(), 'retryAfter' => $e->getRetryAfter()]), "\n";
} catch (\Throwable $e) {
    echo json_encode(['exception' => get_class($e), 'message' => $e->getMessage()]), "\n";
}
