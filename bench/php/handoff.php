<?php

declare(strict_types=1);

// How long a PHP request waits to get one small upload off its hands, in a burst of calls back to
// back (after php-client/bin/handoff-bench.php). Variants:
//   acked-unix, acked-tcp  Client::upload() (line protocol, the default): the daemon's 202 is read (job journaled)
//   acked-http-unix        the same with 'protocol' => 'http' (POST /v1/jobs)
//   acked-floor            Client::upload() to bench/lib/floor-server.js: the hand-off's own work alone (checks,
//                          record, journal write), no daemon
//   noack-unix             Client::send(): write the job line, close, never read the answer
//   exec-curl              exec('curl -T … &'): a background curl per call
//   direct                 a blocking php-curl PUT of the file to httpd, new handle per call
//   redis-lpush            php-redis LPUSH of the same JSON job body Client::upload() sends, to a
//                          redis-server with appendfsync everysec (the anchor of issue #18)
//   pingpong               the same JSON job line written to a second PHP process over a unix socketpair,
//                          which answers it with a 202 line as long as the daemon's and does nothing else:
//                          the floor of any acknowledged hand-off between two processes on this machine
// Argument: {"variant", "count", "pauseUs" (between calls, 0: back to back), "file", "socket", "port", "sidecarTarget", "remotePrefix",
//            "url" (httpd base, exec-curl and direct), "redisPort", "redisKey" (redis-lpush), "timesDir" (exec-curl: each background call
//            runs under bash, whose `times` builtin writes the CPU of its curl to timesDir/<i>)}
// Prints percentiles of the calls that did not throw, calls/s and hand-offs/s, errors, CPU of this process and of its waited-for
// children, and the job ids (the benchmark looks each one up to count lost jobs).

require __DIR__ . '/common.php';

use TransferSidecar\Client;
use TransferSidecar\JobId;
use TransferSidecar\Exception\SidecarException;

$a = benchArgs();
$variant = $a['variant'];
$count = (int) $a['count'];
$pauseUs = (int) ($a['pauseUs'] ?? 0); // between calls, not timed: a paced variant
$file = $a['file'];
$size = filesize($file);
$ids = [];
$errors = [];
$redis = null;
$echo = null; // pingpong: [the socket, the answering child's pid]

$call = match ($variant) {
    'acked-unix', 'acked-tcp', 'acked-http-unix', 'acked-thread', 'acked-floor', 'noack-unix' => (static function () use ($a, $variant, $file, &$ids): callable {
        $options = $variant === 'acked-tcp' ? ['host' => '127.0.0.1', 'port' => (int) $a['port']] : ['socket' => $a['socket']];
        if ($variant === 'acked-thread') {
            $options['handoff_socket'] = $a['handoffSocket']; // the hand-off thread's socket (handoff.listen)
        }
        // The client's default protocol is the line protocol; acked-http-unix is POST /v1/jobs.
        $options['protocol'] = $variant === 'acked-http-unix' ? 'http' : 'lines';
        $client = new Client($options + ['read_timeout' => 30.0]);
        return static function (int $i) use ($client, $variant, $a, $file, &$ids): void {
            $remote = sprintf('/%s-%d.bin', $a['remotePrefix'], $i);
            $ids[] = $variant === 'noack-unix' ? $client->send('upload', $a['sidecarTarget'], $file, $remote) : $client->upload($a['sidecarTarget'], $file, $remote);
        };
    })(),
    'exec-curl' => static function (int $i) use ($a, $file): void {
        $curl = sprintf('curl -sS -T %s -o /dev/null %s', escapeshellarg($file), escapeshellarg(sprintf('%s%s-%d.bin', $a['url'], $a['remotePrefix'], $i)));
        $command = sprintf('bash -c %s > /dev/null 2>&1 &', escapeshellarg(sprintf('%s; times > %s/%d', $curl, $a['timesDir'], $i)));
        exec($command, $output, $code);
        if ($code !== 0) {
            throw new RuntimeException("exec exited with $code");
        }
    },
    'direct' => static function (int $i) use ($a, $file, $size): void {
        $in = fopen($file, 'rb');
        $ch = curl_init(sprintf('%s%s-%d.bin', $a['url'], $a['remotePrefix'], $i));
        curl_setopt_array($ch, [CURLOPT_UPLOAD => true, CURLOPT_INFILE => $in, CURLOPT_INFILESIZE => $size, CURLOPT_RETURNTRANSFER => true]);
        $ok = curl_exec($ch);
        $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        curl_close($ch);
        fclose($in);
        if ($ok === false || ($status !== 201 && $status !== 204)) {
            throw new RuntimeException("PUT answered $status");
        }
    },
    'redis-lpush' => (static function () use ($a, $file, &$ids, &$redis): callable {
        $redis = new Redis();
        $redis->connect('127.0.0.1', (int) $a['redisPort'], 5.0);
        return static function (int $i) use ($redis, $a, $file, &$ids): void {
            $id = JobId::generate();
            if ($redis->lPush($a['redisKey'], uploadJobBody($id, $a['sidecarTarget'], $file, sprintf('/%s-%d.bin', $a['remotePrefix'], $i))) === false) {
                throw new RuntimeException('LPUSH failed: ' . $redis->getLastError());
            }
            $ids[] = $id;
        };
    })(),
    'pingpong' => (static function () use ($a, $file, &$echo): callable {
        [$ours, $theirs] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP)
            ?: fail('stream_socket_pair failed');
        $pid = pcntl_fork();
        if ($pid === -1) {
            fail('pcntl_fork failed');
        }
        if ($pid === 0) {
            fclose($ours);
            // Each line answered as the daemon answers a hand-off, and nothing else done.
            while (($line = fgets($theirs)) !== false) {
                fwrite($theirs, '{"status":202,"id":"' . JobId::generate() . '","state":"queued"}' . "\n");
            }
            exit(0);
        }
        fclose($theirs);
        $echo = [$ours, $pid];
        return static function (int $i) use ($ours, $a, $file): void {
            fwrite($ours, uploadJobBody(JobId::generate(), $a['sidecarTarget'], $file, sprintf('/%s-%d.bin', $a['remotePrefix'], $i)) . "\n");
            $answer = fgets($ours);
            if ($answer === false || json_decode($answer, true)['status'] !== 202) {
                throw new RuntimeException('no answer from the other process');
            }
        };
    })(),
    default => fail('unknown variant ' . json_encode($variant)),
};

// Times of the calls that handed the upload off: a call that threw (no-ack: most of a burst can
// fail with EAGAIN at once) handed nothing off, and its few µs would pass for a hand-off's.
$times = [];
$cpu0 = cpuSeconds();
$children0 = cpuSeconds(1);
$started = hrtime(true);
for ($i = 0; $i < $count; $i++) {
    $t0 = hrtime(true);
    try {
        $call($i);
        $times[] = (hrtime(true) - $t0) / 1e9;
    } catch (SidecarException | RuntimeException | RedisException $e) {
        $errors[] = $e->getMessage();
    }
    if ($pauseUs > 0) {
        usleep($pauseUs);
    }
}
$wall = (hrtime(true) - $started) / 1e9;
// pingpong: the answering process ends with the socket, and its CPU is counted with the children's.
if ($echo !== null) {
    fclose($echo[0]);
    pcntl_waitpid($echo[1], $status);
}
// redis-lpush: the jobs that are in the list (lost = handed off but not there), then emptied.
$queued = null;
if ($redis !== null) {
    $queued = $redis->lLen($a['redisKey']);
    $redis->del($a['redisKey']);
}

emit(($times === [] ? ['medianUs' => null, 'p90Us' => null, 'p99Us' => null, 'meanUs' => null] : percentilesUs($times)) + [
    'variant' => $variant,
    'calls' => $count,
    'seconds' => $wall,
    'callsPerSecond' => $count / $wall,
    'handedOffPerSecond' => count($times) / $wall,
    'errors' => count($errors),
    'firstErrors' => array_slice(array_values(array_unique($errors)), 0, 3),
    'cpuS' => cpuSeconds() - $cpu0,
    'childrenCpuS' => cpuSeconds(1) - $children0,
    'queued' => $queued,
    'ids' => $variant === 'redis-lpush' ? [] : $ids,
]);
