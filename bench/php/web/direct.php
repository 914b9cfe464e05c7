<?php

declare(strict_types=1);

// Web endpoint that uploads a small file to httpd itself (php-curl PUT, new handle) before answering.
// Served by php-fpm (behind nginx) for bench/lib/web.js; configured by the environment: BENCH_URL (httpd
// collection, ends in /), BENCH_FILE.

$file = getenv('BENCH_FILE');
$in = fopen($file, 'rb');
$ch = curl_init(getenv('BENCH_URL') . 'web-direct-' . bin2hex(random_bytes(8)) . '.bin');
curl_setopt_array($ch, [CURLOPT_UPLOAD => true, CURLOPT_INFILE => $in, CURLOPT_INFILESIZE => filesize($file), CURLOPT_RETURNTRANSFER => true]);
$ok = curl_exec($ch);
$status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
curl_close($ch);
fclose($in);
if ($ok === false || ($status !== 201 && $status !== 204)) {
    http_response_code(500);
    echo "upload answered HTTP $status\n";
    exit;
}
echo "uploaded\n";
