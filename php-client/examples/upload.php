<?php

declare(strict_types=1);

// Browser upload → sidecar, without making the user wait for the transfer:
//   GET  shows a form;
//   POST (multipart, field "file") moves the upload into SIDECAR_UPLOAD_ROOT (a directory inside
//        the daemon's roots), hands it to target SIDECAR_TARGET (default "local", the Quick start's) as
//        /uploads/<date>/<random>-<name> and answers 202 {"id", "status_url"} at once.
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

$file = $_FILES['file'] ?? null;
if (!is_array($file) || !is_string($file['tmp_name'] ?? null) || !is_int($file['error'] ?? null)) {
    $answer(400, ['error' => 'send one file in the multipart field "file"']);
    return;
}
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

// Only the last path component, only safe characters, bounded length; the random prefix makes it unique.
$name = basename(str_replace('\\', '/', (string) ($file['name'] ?? '')));
$name = substr(trim((string) preg_replace('/[^A-Za-z0-9._-]+/', '_', $name), '._'), -100);
$name = $name === '' ? 'upload.bin' : $name;
$date = gmdate('Y-m-d');
$stored = bin2hex(random_bytes(8)) . '-' . $name;
$dir = $root . '/' . $date;
if (!is_dir($dir) && !@mkdir($dir, 0750, true) && !is_dir($dir)) {
    $answer(500, ['error' => 'cannot create the upload directory']);
    return;
}
$local = $dir . '/' . $stored;
if (!move_uploaded_file($file['tmp_name'], $local)) {
    $answer(500, ['error' => 'cannot store the upload']);
    return;
}

$target = getenv('SIDECAR_TARGET') ?: 'local';
try {
    $id = $makeClient()->upload($target, $local, "/uploads/$date/$stored");
} catch (RequestException $e) {
    // The daemon refused the job (configuration problem): nothing will move the file. Its message
    // (which may name server paths) goes to the log, its code to the browser.
    error_log(sprintf('transfer-sidecar refused the upload of %s to %s: %s %s', $local, $target, $e->getErrorCode(), $e->getMessage()));
    @unlink($local);
    $answer(500, ['error' => 'the transfer service refused the job', 'code' => $e->getErrorCode()]);
    return;
} catch (SidecarException $e) {
    // Unreachable and no spool (or the spool failed): the file stays for a later retry.
    error_log(sprintf('transfer-sidecar could not take the upload of %s: %s', $local, $e->getMessage()));
    $answer(503, ['error' => 'the transfer service is unavailable, try again later']);
    return;
}

header('Location: status.php?id=' . rawurlencode($id));
$answer(202, ['id' => $id, 'status_url' => 'status.php?id=' . rawurlencode($id)]);
