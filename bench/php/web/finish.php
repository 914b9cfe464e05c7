<?php

declare(strict_types=1);

// Web endpoint that answers at once (fastcgi_finish_request()) and then uploads a small file to
// httpd itself with php-curl, as direct.php does: the user does not wait, but the php-fpm worker
// stays busy for the whole transfer. Served by php-fpm for bench/lib/web.js; configured by the
// environment: BENCH_URL (httpd collection, ends in /), BENCH_FILE.

echo "answered\n";
fastcgi_finish_request();

require __DIR__ . '/put.php';
$status = benchPut('web-finish-');
if ($status !== 201 && $status !== 204) {
    // The user has the answer already: all that is left is the log.
    error_log("finish.php: upload answered HTTP $status");
}
