<?php

declare(strict_types=1);

// Web endpoint that answers at once (fastcgi_finish_request()) and then uploads a small file to
// httpd itself with php-curl, as direct.php does: the user does not wait, but the php-fpm worker
// stays busy for the whole transfer. Served by php-fpm for bench/lib/web.js; configured by the
// environment: BENCH_URL (httpd collection, ends in /), BENCH_FILE.

echo "answered\n";
fastcgi_finish_request();

$file = getenv('BENCH_FILE');
$in = fopen($file, 'rb');
$ch = curl_init(getenv('BENCH_URL') . 'web-finish-' . bin2hex(random_bytes(8)) . '.bin');
curl_setopt_array($ch, [CURLOPT_UPLOAD => true, CURLOPT_INFILE => $in, CURLOPT_INFILESIZE => filesize($file), CURLOPT_RETURNTRANSFER => true]);
$ok = curl_exec($ch);
$status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
curl_close($ch);
fclose($in);
if ($ok === false || ($status !== 201 && $status !== 204)) {
    // The user has the answer already: all that is left is the log.
    error_log("finish.php: upload answered HTTP $status");
}
