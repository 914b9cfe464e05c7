<?php

declare(strict_types=1);

// The PHP side of bench/handoff-floor.js: one keep-alive connection to a unix socket, a small POST
// per call (as Client::upload() sends), the whole answer read (head, then Content-Length bytes).
// Arguments: SOCKET COUNT PAUSE_US. Prints {"median", "p90"} in µs.

[, $path, $count, $pauseUs] = $argv;
$count = (int) $count;
$pauseUs = (int) $pauseUs;
$body = json_encode(['direction' => 'upload', 'target' => 'files', 'local' => '/tmp/x.bin', 'remote' => '/x.bin']);
$request = "POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " . strlen($body) . "\r\n\r\n" . $body;
$s = stream_socket_client("unix://$path", $errno, $errstr, 1.0);
if ($s === false) {
    fwrite(STDERR, "connect $path: $errstr\n");
    exit(1);
}
$times = [];
for ($i = 0; $i < $count; $i++) {
    $t0 = hrtime(true);
    fwrite($s, $request);
    $answer = '';
    while (($end = strpos($answer, "\r\n\r\n")) === false) {
        $answer .= fread($s, 8192);
    }
    preg_match('/\r\ncontent-length: *(\d+)/i', substr($answer, 0, $end), $m);
    while (strlen($answer) < $end + 4 + (int) $m[1]) {
        $answer .= fread($s, 8192);
    }
    $times[] = (hrtime(true) - $t0) / 1000;
    if ($pauseUs > 0) {
        usleep($pauseUs);
    }
}
sort($times);
echo json_encode(['median' => $times[intdiv($count, 2)], 'p90' => $times[intdiv($count * 9, 10)]]), "\n";
