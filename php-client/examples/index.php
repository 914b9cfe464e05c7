<?php

declare(strict_types=1);

// The examples' start page: the upload form, and the status and download pages of a job id.

header('Content-Type: text/html; charset=utf-8');
$id = is_string($_GET['id'] ?? null) ? $_GET['id'] : '';
$e = static fn (string $s): string => htmlspecialchars($s, ENT_QUOTES);
?>
<!doctype html>
<title>transfer-sidecar examples</title>
<h1>transfer-sidecar examples</h1>
<ul>
  <li><a href="upload.php">upload.php</a>: upload a file; the sidecar takes it over and the page answers 202 at once</li>
  <li><form action="status.php" style="display:inline">status.php: <input name="id" value="<?= $e($id) ?>" placeholder="job id" required><input type="hidden" name="html" value="1"> <button>show the job</button></form></li>
  <li><form action="download.php" style="display:inline">download.php: <input name="id" value="<?= $e($id) ?>" placeholder="job id" required> <button>download its file</button></form></li>
</ul>
