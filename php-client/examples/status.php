<?php

declare(strict_types=1);

// A job's state and progress: JSON, or a small HTML page that refreshes itself while the job
// runs (?html=1).   status.php?id=<job id>[&html=1]

use TransferSidecar\Exception\JobNotFoundException;
use TransferSidecar\Exception\SidecarException;
use TransferSidecar\JobId;

$makeClient = require __DIR__ . '/bootstrap.php';

$id = is_string($_GET['id'] ?? null) ? $_GET['id'] : '';
$html = ($_GET['html'] ?? '') === '1';

if (!JobId::isValid($id)) {
    $status = 400;
    $view = ['error' => 'give the job id as ?id=...'];
} else {
    try {
        $job = $makeClient()->status($id);
        $status = 200;
        $size = is_int($job['size'] ?? null) ? $job['size'] : null;
        $view = [
            'id' => $job['id'],
            'state' => $job['state'],
            'remote' => $job['remote'] ?? null,
            'bytes' => $job['bytes'] ?? 0,
            'size' => $size,
            'progress' => $size ? round(100 * ($job['bytes'] ?? 0) / $size, 1) : null,
            'rate' => $job['rate'] ?? null,
            'attempts' => $job['attempts'] ?? null,
            'error' => $job['error'] ?? null,
            'finishedAt' => $job['finishedAt'] ?? null,
        ];
    } catch (JobNotFoundException) {
        $status = 404;
        $view = ['error' => 'no such job (or it has expired)'];
    } catch (SidecarException $e) {
        error_log('transfer-sidecar: ' . $e->getMessage());
        $status = 503;
        $view = ['error' => 'the transfer service is unavailable'];
    }
}

http_response_code($status);
header('Cache-Control: no-store');
if (!$html) {
    header('Content-Type: application/json');
    echo json_encode($view, JSON_UNESCAPED_SLASHES), "\n";
    return;
}

header('Content-Type: text/html; charset=utf-8');
$e = static fn ($v): string => htmlspecialchars(is_scalar($v) ? (string) $v : (string) json_encode($v), ENT_QUOTES);
$running = in_array($view['state'] ?? null, ['queued', 'running'], true);
?>
<!doctype html>
<?php if ($running): ?><meta http-equiv="refresh" content="2"><?php endif ?>
<title>Transfer <?= $e($id) ?></title>
<?php if (isset($view['state'])): ?>
<p>Job <code><?= $e($view['id']) ?></code>: <strong><?= $e($view['state']) ?></strong>
<?php if ($view['progress'] !== null): ?> — <?= $e($view['progress']) ?> % (<?= $e($view['bytes']) ?> of <?= $e($view['size']) ?> bytes)<?php endif ?></p>
<?php if ($view['error'] !== null): ?><p>Error: <code><?= $e($view['error']['code'] ?? '') ?></code> <?= $e($view['error']['message'] ?? '') ?></p><?php endif ?>
<?php else: ?>
<p><?= $e($view['error']) ?></p>
<?php endif ?>
