<?php

declare(strict_types=1);

// Shared by the benchmark's PHP scripts: arguments (one JSON object as the only argument), CPU
// and memory of this process, and the one JSON line each script prints for bench/lib/php.js.

require __DIR__ . '/../../php-client/tests/bootstrap.php';

const FINAL_STATES = ['succeeded', 'failed', 'cancelled'];

/** @return array<string, mixed> */
function benchArgs(): array
{
    global $argv;
    $args = json_decode($argv[1] ?? '', true);
    if (!is_array($args)) {
        fwrite(STDERR, sprintf("usage: php %s '<arguments as a JSON object>'\n", basename($argv[0])));
        exit(2);
    }
    return $args;
}

/** The JSON body Client::upload() sends for this job (its encoding flags), for the competitors that carry it. */
function uploadJobBody(string $id, string $target, string $local, string $remote): string
{
    return json_encode(['id' => $id, 'direction' => 'upload', 'target' => $target, 'local' => $local, 'remote' => $remote],
        JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_THROW_ON_ERROR);
}

/** User + system CPU seconds of this process (RUSAGE_SELF) or of its waited-for children (1). */
function cpuSeconds(int $who = 0): float
{
    $u = getrusage($who);
    return $u['ru_utime.tv_sec'] + $u['ru_utime.tv_usec'] / 1e6 + $u['ru_stime.tv_sec'] + $u['ru_stime.tv_usec'] / 1e6;
}

/** User + system CPU seconds of another process so far, from /proc/PID/stat. */
function processCpuSeconds(int $pid): float
{
    static $ticks = null;
    $ticks ??= (int) trim((string) shell_exec('getconf CLK_TCK')) ?: 100;
    $stat = (string) file_get_contents("/proc/$pid/stat");
    $fields = explode(' ', substr($stat, strrpos($stat, ')') + 2));
    return ((int) $fields[11] + (int) $fields[12]) / $ticks;
}

/** Unfinished jobs of the daemon on `$socket`, from its /healthz (one kept connection). */
function sidecarUnfinished(string $socket): int
{
    static $ch = null;
    if ($ch === null) {
        $ch = curl_init('http://localhost/healthz');
        curl_setopt_array($ch, [CURLOPT_UNIX_SOCKET_PATH => $socket, CURLOPT_RETURNTRANSFER => true]);
    }
    $body = curl_exec($ch);
    $health = is_string($body) ? json_decode($body, true) : null;
    if (!is_array($health) || !isset($health['jobs']['unfinished'])) {
        fail('GET /healthz: no job counts in ' . json_encode($body));
    }
    return (int) $health['jobs']['unfinished'];
}

/** A "VmXxx: N kB" field of /proc/self/status, in KiB. */
function statusKiB(string $field): ?int
{
    $text = @file_get_contents('/proc/self/status');
    if ($text !== false && preg_match('/^' . preg_quote($field, '/') . ':\s+(\d+) kB/m', $text, $m) === 1) {
        return (int) $m[1];
    }
    return null;
}

/** Median, p90, p99 and mean of durations in seconds, as µs. @param list<float> $seconds */
function percentilesUs(array $seconds): array
{
    sort($seconds);
    $n = count($seconds);
    $at = static fn (float $p): float => $n === 0 ? 0.0 : $seconds[min($n - 1, (int) floor($p * $n))] * 1e6;
    $mid = intdiv($n, 2);
    $median = $n === 0 ? 0.0 : ($n % 2 === 1 ? $seconds[$mid] : ($seconds[$mid - 1] + $seconds[$mid]) / 2) * 1e6;
    return ['medianUs' => $median, 'p90Us' => $at(0.9), 'p99Us' => $at(0.99), 'meanUs' => $n === 0 ? 0.0 : array_sum($seconds) / $n * 1e6];
}

/** Prints the result with this process's peak RSS (VmHWM) and PHP's own peak allocation. */
function emit(array $result): void
{
    $result['peakRssKiB'] = statusKiB('VmHWM');
    $result['memoryPeakBytes'] = memory_get_peak_usage(true);
    echo json_encode($result, JSON_UNESCAPED_SLASHES | JSON_THROW_ON_ERROR), "\n";
}

function fail(string $message): never
{
    fwrite(STDERR, $message . "\n");
    exit(1);
}
