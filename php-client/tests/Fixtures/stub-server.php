<?php

declare(strict_types=1);

// A scripted server on a unix socket, for the client's unit tests (HTTP requests, or JSON lines of
// the line protocol, logged with an empty head):
//   php stub-server.php SOCKET SCRIPT.json LOG.jsonl
// SCRIPT is a list of connections, each a list of steps run in order:
//   {"reply": "<base64>"}      read one request, write those raw bytes
//   {"reply": …, "pause": 2}   the same, then say nothing for 2 s
//   {"close": true}            read one request, close without answering
//   {"silent": 1.5}            read one request, say nothing for 1.5 s, close
// In a reply, 22 "@" stand for the 22-character id of the job in the request's JSON body.
// When a connection's steps are done it is closed. Every request read is appended to LOG as
// {"conn": <n>, "head": "...", "body": "..."}. Prints READY once listening; exits after the script.

[, $socket, $scriptFile, $logFile] = $argv;
$script = json_decode((string) file_get_contents($scriptFile), true, 512, JSON_THROW_ON_ERROR);
@unlink($socket);
$server = stream_socket_server('unix://' . $socket, $errno, $errstr);
if ($server === false) {
    fwrite(STDERR, "stub: cannot listen on $socket: $errstr\n");
    exit(1);
}
echo "READY\n";
fflush(STDOUT);

$readRequest = static function ($conn): ?array {
    $head = '';
    while (($line = fgets($conn)) !== false) {
        if ($head === '' && str_starts_with($line, '{')) {
            return ['head' => '', 'body' => rtrim($line, "\n")]; // a line-protocol request
        }
        $head .= $line;
        if ($line === "\r\n") {
            break;
        }
    }
    if ($head === '') {
        return null;
    }
    $body = '';
    if (preg_match('/^content-length:\s*(\d+)/mi', $head, $m) === 1 && (int) $m[1] > 0) {
        $body = (string) stream_get_contents($conn, (int) $m[1]);
    }
    return ['head' => $head, 'body' => $body];
};

foreach ($script as $n => $steps) {
    $conn = @stream_socket_accept($server, 30);
    if ($conn === false) {
        fwrite(STDERR, "stub: no connection $n within 30 s\n");
        exit(2);
    }
    foreach ($steps as $step) {
        $request = $readRequest($conn);
        if ($request === null) {
            break;
        }
        file_put_contents($logFile, json_encode(['conn' => $n] + $request) . "\n", FILE_APPEND);
        if (isset($step['reply'])) {
            $id = json_decode($request['body'], true)['id'] ?? null;
            $reply = base64_decode($step['reply']);
            fwrite($conn, is_string($id) && strlen($id) === 22 ? str_replace(str_repeat('@', 22), $id, $reply) : $reply);
            if (isset($step['pause'])) {
                usleep((int) ($step['pause'] * 1e6));
            }
        } elseif (isset($step['silent'])) {
            usleep((int) ($step['silent'] * 1e6));
            break;
        } else {
            break;
        }
    }
    fclose($conn);
}
fclose($server);
@unlink($socket);
