<?php

declare(strict_types=1);

// Web endpoint that uploads a small file to httpd itself (php-curl PUT, new handle) before answering.
// Served by php-fpm (behind nginx) for bench/lib/web.js; configured by the environment: BENCH_URL (httpd
// collection, ends in /), BENCH_FILE.

require __DIR__ . '/put.php';
$status = benchPut('web-direct-');
if ($status !== 201 && $status !== 204) {
    http_response_code(500);
    echo "upload answered HTTP $status\n";
    exit;
}
echo "uploaded\n";
