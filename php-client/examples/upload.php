<?php

declare(strict_types=1);

// Browser upload → sidecar, without making the user wait for the transfer:
//   GET  shows a form;
//   POST (multipart, field "file") moves the upload into SIDECAR_UPLOAD_ROOT (a directory inside
//        the daemon's roots), hands it to target SIDECAR_TARGET (default "local", the Quick start's) as
//        /uploads/<date>/<random>-<name> and answers 202 {"id", "status_url"} at once.
//   POST (multipart, field "files[]", several files) does the same for each, all handed over in one
//        Client::handOffAll() call, and answers 202 {"jobs": [{"name", "id", "status_url"}, …]}; if
//        the daemon refused or could not take some, 500 or 503 with each file's "id" or "code".
// Run: see php-client/README.md, Examples (the daemon's answer to a refused job goes to PHP's error log).

use TransferSidecar\Exception\RequestException;
use TransferSidecar\Exception\SidecarException;

$makeClient = require __DIR__ . '/bootstrap.php';

$answer = static function (int $status, array $body): void {
    http_response_code($status);
    header('Content-Type: application/json');
    header('Cache-Control: no-store');
    echo json_encode($body, JSON_UNESCAPED_SLASHES), "\n";
};

if (($_SERVER['REQUEST_METHOD'] ?? 'GET') === 'GET') {
    header('Content-Type: text/html; charset=utf-8');
    echo <<<'HTML'
        <!doctype html>
        <title>Upload through transfer-sidecar</title>
        <form method="post" enctype="multipart/form-data">
          <input type="file" name="file" required>
          <button>Upload</button>
        </form>
        <form method="post" enctype="multipart/form-data">
          <input type="file" name="files[]" multiple required>
          <button>Upload several</button>
        </form>
        HTML;
    return;
}
if ($_SERVER['REQUEST_METHOD'] !== 'POST') {
    header('Allow: GET, POST');
    $answer(405, ['error' => 'use GET or POST']);
    return;
}

$root = getenv('SIDECAR_UPLOAD_ROOT');
$root = is_string($root) && $root !== '' ? realpath($root) : false;
if ($root === false || !is_dir($root)) {
    $answer(500, ['error' => 'SIDECAR_UPLOAD_ROOT must name an existing directory inside the daemon\'s roots']);
    return;
}

// One entry of $_FILES as a list of files: "file" is one, "files[]" several (PHP lists each
// property of those in an array of its own).
$uploaded = static function (mixed $field): ?array {
    if (!is_array($field) || !isset($field['tmp_name'], $field['error'])) {
        return null;
    }
    if (!is_array($field['tmp_name'])) {
        return [$field];
    }
    $files = [];
    foreach (array_keys($field['tmp_name']) as $k) {
        $files[] = ['name' => $field['name'][$k] ?? '', 'tmp_name' => $field['tmp_name'][$k], 'error' => $field['error'][$k] ?? UPLOAD_ERR_NO_FILE, 'size' => $field['size'][$k] ?? 0];
    }
    return $files;
};
$several = isset($_FILES['files']);
$files = $uploaded($several ? $_FILES['files'] : ($_FILES['file'] ?? null));
$valid = $files !== null && $files !== [] && count($files) <= 100;
foreach ($files ?? [] as $file) {
    $valid = $valid && is_string($file['tmp_name']) && is_int($file['error']);
}
if (!$valid) {
    $answer(400, ['error' => 'send one file in the multipart field "file", or up to 100 in "files[]"']);
    return;
}
foreach ($files as $file) {
    if ($file['error'] !== UPLOAD_ERR_OK) {
        $why = [
            UPLOAD_ERR_INI_SIZE => 'the file exceeds upload_max_filesize',
            UPLOAD_ERR_FORM_SIZE => 'the file exceeds MAX_FILE_SIZE',
            UPLOAD_ERR_PARTIAL => 'the file arrived only partly',
            UPLOAD_ERR_NO_FILE => 'no file was sent',
        ][$file['error']] ?? 'the upload failed on the server (error ' . $file['error'] . ')';
        $answer($file['error'] === UPLOAD_ERR_INI_SIZE || $file['error'] === UPLOAD_ERR_FORM_SIZE ? 413 : 400, ['error' => $why]);
        return;
    }
    if (!is_uploaded_file($file['tmp_name']) || (int) $file['size'] <= 0) {
        $answer(400, ['error' => 'empty or invalid upload']);
        return;
    }
}

$date = gmdate('Y-m-d');
$dir = $root . '/' . $date;
if (!is_dir($dir) && !@mkdir($dir, 0750, true) && !is_dir($dir)) {
    $answer(500, ['error' => 'cannot create the upload directory']);
    return;
}
$target = getenv('SIDECAR_TARGET') ?: 'local';
$jobs = [];
foreach ($files as $file) {
    // Only the last path component, only safe characters, bounded length; the random prefix makes it unique.
    $name = basename(str_replace('\\', '/', (string) $file['name']));
    $name = substr(trim((string) preg_replace('/[^A-Za-z0-9._-]+/', '_', $name), '._'), -100);
    $name = $name === '' ? 'upload.bin' : $name;
    $stored = bin2hex(random_bytes(8)) . '-' . $name;
    $local = $dir . '/' . $stored;
    if (!move_uploaded_file($file['tmp_name'], $local)) {
        foreach ($jobs as $job) {
            @unlink($job['local']);
        }
        $answer(500, ['error' => 'cannot store the upload']);
        return;
    }
    $jobs[] = ['direction' => 'upload', 'target' => $target, 'local' => $local, 'remote' => "/uploads/$date/$stored", 'name' => $name];
}

$statusUrl = static fn (string $id): string => 'status.php?id=' . rawurlencode($id);
try {
    $results = $makeClient()->handOffAll(array_map(static fn (array $job): array => array_diff_key($job, ['name' => true]), $jobs));
} catch (SidecarException $e) { // a job the client itself cannot send (InvalidArgumentException)
    error_log(sprintf('transfer-sidecar: cannot hand over the uploads: %s', $e->getMessage()));
    $answer(500, ['error' => 'the uploads cannot be handed over']);
    return;
}
$answers = [];
$status = 202;
foreach ($results as $i => $result) {
    $job = $jobs[$i];
    if (is_string($result)) {
        $answers[] = ['name' => $job['name'], 'id' => $result, 'status_url' => $statusUrl($result)];
    } elseif ($result instanceof RequestException) {
        // The daemon refused the job (configuration problem): nothing will move the file. Its message
        // (which may name server paths) goes to the log, its code to the browser.
        error_log(sprintf('transfer-sidecar refused the upload of %s to %s: %s %s', $job['local'], $target, $result->getErrorCode(), $result->getMessage()));
        @unlink($job['local']);
        $answers[] = ['name' => $job['name'], 'code' => $result->getErrorCode()];
        $status = 500;
    } else {
        // Unreachable and no spool (or the spool failed): the file stays for a later retry.
        error_log(sprintf('transfer-sidecar could not take the upload of %s: %s', $job['local'], $result->getMessage()));
        $answers[] = ['name' => $job['name'], 'code' => 'UNAVAILABLE'];
        $status = $status === 202 ? 503 : $status;
    }
}

if (!$several) {
    $one = $answers[0];
    if (isset($one['id'])) {
        header('Location: ' . $one['status_url']);
        $answer(202, ['id' => $one['id'], 'status_url' => $one['status_url']]);
    } elseif ($status === 500) {
        $answer(500, ['error' => 'the transfer service refused the job', 'code' => $one['code']]);
    } else {
        $answer(503, ['error' => 'the transfer service is unavailable, try again later']);
    }
    return;
}
$answer($status, $status === 202 ? ['jobs' => $answers] : ['error' => $status === 500 ? 'the transfer service refused some of the jobs' : 'the transfer service could not take some of the jobs, try again later', 'jobs' => $answers]);
