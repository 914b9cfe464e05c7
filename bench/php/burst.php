<?php

declare(strict_types=1);

// One of the burst section's concurrent clients (issue #18, after test/reliability/php-burst.php):
// it gets ready (a Client over the unix socket, or a php-redis connection), says so by creating
// readyFile, waits for goFile to appear (all clients start together), then hands off `count`
// uploads of the same small file back to back, each to its own remote name, and writes
// "id remote" per acked hand-off to idsFile and each hand-off's µs to timesFile.
// Roles:
//   sidecar      Client::upload() to the daemon's file target (with handoffSocket: on the hand-off
//                thread's socket, the client's handoff_socket)
//   redis        php-redis LPUSH of the same JSON job body (appendfsync everysec)
//   redis-check  after a redis burst: LLEN and distinct ids of the list, then DEL
// Argument: {"role", "worker", "count", "socket", "handoffSocket", "target", "file", "prefix",
//            "readyFile", "goFile", "idsFile", "timesFile", "redisPort", "redisKey"}
// Prints acked, errors, startedAt/endedAt (microtime(true) when it saw goFile, after its last
// ack: one clock for all clients), and its CPU seconds.

require __DIR__ . '/common.php';

use TransferSidecar\Client;
use TransferSidecar\JobId;
use TransferSidecar\Exception\SidecarException;

$a = benchArgs();
$role = $a['role'];

if ($role === 'redis-check') {
    $redis = new Redis();
    $redis->connect('127.0.0.1', (int) $a['redisPort'], 5.0);
    $ids = [];
    $length = $redis->lLen($a['redisKey']);
    for ($start = 0; $start < $length; $start += 10000) {
        foreach ($redis->lRange($a['redisKey'], $start, $start + 9999) as $body) {
            $ids[json_decode($body, true, 4, JSON_THROW_ON_ERROR)['id']] = true;
        }
    }
    $redis->del($a['redisKey']);
    emit(['length' => $length, 'distinct' => count($ids)]);
    exit(0);
}

$count = (int) $a['count'];
$call = match ($role) {
    'sidecar' => (static function () use ($a): callable {
        $client = new Client(['socket' => $a['socket'], 'handoff_socket' => $a['handoffSocket'] ?? null, 'protocol' => $a['protocol'], 'read_timeout' => 120.0]);
        return static fn (string $remote): string => $client->upload($a['target'], $a['file'], $remote);
    })(),
    'redis' => (static function () use ($a): callable {
        $redis = new Redis();
        $redis->connect('127.0.0.1', (int) $a['redisPort'], 5.0);
        return static function (string $remote) use ($redis, $a): string {
            $id = JobId::generate();
            if ($redis->lPush($a['redisKey'], uploadJobBody($id, $a['target'], $a['file'], $remote)) === false) {
                throw new RuntimeException('LPUSH failed: ' . $redis->getLastError());
            }
            return $id;
        };
    })(),
    default => fail('unknown role ' . json_encode($role)),
};

touch($a['readyFile']);
while (!file_exists($a['goFile'])) {
    usleep(100);
    clearstatcache();
}
$startedAt = microtime(true);
$cpu0 = cpuSeconds();
$acked = [];
$times = [];
$errors = [];
for ($i = 0; $i < $count; $i++) {
    $remote = sprintf('%s/w%02d/%d.bin', $a['prefix'], (int) $a['worker'], $i);
    $t0 = hrtime(true);
    try {
        $acked[] = $call($remote) . ' ' . $remote;
        $times[] = intdiv(hrtime(true) - $t0, 1000);
    } catch (SidecarException | RuntimeException | RedisException $e) {
        $errors[] = get_class($e) . ': ' . $e->getMessage();
    }
}
$endedAt = microtime(true);
$cpuS = cpuSeconds() - $cpu0;
file_put_contents($a['idsFile'], implode("\n", $acked) . "\n");
file_put_contents($a['timesFile'], implode("\n", $times) . "\n");
emit([
    'worker' => (int) $a['worker'],
    'count' => $count,
    'acked' => count($acked),
    'errors' => count($errors),
    'firstErrors' => array_slice(array_values(array_unique($errors)), 0, 3),
    'startedAt' => $startedAt,
    'endedAt' => $endedAt,
    'cpuS' => $cpuS,
]);
