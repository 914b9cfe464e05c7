<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

use PHPUnit\Framework\TestCase;
use TransferSidecar\Client;
use TransferSidecar\Exception\JobNotFoundException;

/**
 * Base of the tests against a running daemon, Apache httpd (mod_dav) and WebHDFS. Every variable
 * in ENV is required: a missing one fails every test loudly (test/php-client.test.js sets them all).
 * The daemon must have the targets `local` (file), `files` (http → HTTPD_UPLOAD_URL) and `hdfs`
 * (webhdfs, base /data as www-data), SIDECAR_ROOT inside its roots, SIDECAR_SPOOL as its spool.dir
 * and SIDECAR_CALLBACK_URL under callbacks.allow with callbacks.secret = SIDECAR_CALLBACK_SECRET.
 */
abstract class IntegrationTestCase extends TestCase
{
    public const ENV = [
        'SIDECAR_SOCKET' => 'unix socket of the daemon',
        'SIDECAR_PORT' => 'loopback TCP port of the daemon',
        'SIDECAR_HANDOFF_SOCKET' => 'the daemon\'s hand-off socket (its handoff.listen)',
        'SIDECAR_ROOT' => 'a directory inside the daemon\'s roots',
        'SIDECAR_SPOOL' => 'the daemon\'s spool.dir',
        'SIDECAR_CALLBACK_URL' => 'a URL prefix under callbacks.allow on a free loopback port, e.g. http://127.0.0.1:PORT/hooks/',
        'SIDECAR_CALLBACK_SECRET' => 'the daemon\'s callbacks.secret',
        'HTTPD_UPLOAD_URL' => 'Apache mod_dav collection URL ending in /upload/',
        'WEBHDFS_NAMENODE' => 'namenode HTTP URL, e.g. http://127.0.0.1:9870',
        'WEBHDFS_USER' => 'HDFS user name (simple auth)',
        'WEBHDFS_BASE' => 'HDFS directory writable by WEBHDFS_USER',
    ];

    /** Per-class directory under SIDECAR_ROOT for this run's files. */
    protected static string $dir;
    /** Unique per-class prefix for remote paths. */
    protected static string $run;

    public static function setUpBeforeClass(): void
    {
        $missing = array_filter(array_keys(self::ENV), static fn (string $name): bool => getenv($name) === false || getenv($name) === '');
        if ($missing !== []) {
            throw new \RuntimeException("integration tests need these environment variables (no test is skipped):\n"
                . implode("\n", array_map(static fn (string $n): string => sprintf('  %s: %s', $n, self::ENV[$n]), $missing))
                . "\nrun them through test/php-client.test.js (npx vitest run test/php-client.test.js), which starts every server");
        }
        static::$run = (new \ReflectionClass(static::class))->getShortName() . '-' . bin2hex(random_bytes(4));
        static::$dir = rtrim(self::env('SIDECAR_ROOT'), '/') . '/' . static::$run;
        if (!is_dir(static::$dir) && !mkdir(static::$dir, 0755, true)) {
            throw new \RuntimeException('cannot create ' . static::$dir);
        }
    }

    protected static function env(string $name): string
    {
        $value = getenv($name);
        if ($value === false || $value === '') {
            throw new \RuntimeException(sprintf('environment variable %s is required: %s', $name, self::ENV[$name] ?? ''));
        }
        return $value;
    }

    /** @param array<string, mixed> $options */
    protected static function unixClient(array $options = []): Client
    {
        return new Client(['socket' => self::env('SIDECAR_SOCKET'), 'read_timeout' => 30.0] + $options);
    }

    /** Job lines to the hand-off thread's socket, the rest to the unix socket. @param array<string, mixed> $options */
    protected static function handoffClient(array $options = []): Client
    {
        return self::unixClient(['handoff_socket' => self::env('SIDECAR_HANDOFF_SOCKET')] + $options);
    }

    /** @param array<string, mixed> $options */
    protected static function tcpClient(array $options = []): Client
    {
        return new Client(['host' => '127.0.0.1', 'port' => (int) self::env('SIDECAR_PORT'), 'read_timeout' => 30.0] + $options);
    }

    /** Writes $size random bytes to a new file under the run directory; returns [path, sha256]. */
    protected static function makeFile(string $name, int $size): array
    {
        $path = static::$dir . '/' . $name;
        $hash = hash_init('sha256');
        $out = fopen($path, 'xb');
        for ($left = $size; $left > 0; $left -= $n) {
            $n = min($left, 1 << 20);
            $chunk = random_bytes($n);
            hash_update($hash, $chunk);
            fwrite($out, $chunk);
        }
        fclose($out);
        return [$path, hash_final($hash)];
    }

    protected static function tempDir(string $prefix): string
    {
        $dir = sys_get_temp_dir() . '/' . $prefix . bin2hex(random_bytes(6));
        mkdir($dir, 0700);
        return $dir;
    }

    /** @return array<string, mixed> the job, after asserting it succeeded */
    protected static function assertSucceeds(Client $client, string $id, float $timeout = 120): array
    {
        $job = $client->wait($id, $timeout);
        self::assertSame('succeeded', $job['state'], sprintf('job %s: %s', $id, json_encode($job)));
        return $job;
    }

    /** Waits until the daemon knows the job (a spooled or fire-and-forget one arrives later). */
    protected static function awaitKnown(Client $client, string $id, float $timeout = 30): array
    {
        $deadline = microtime(true) + $timeout;
        for (;;) {
            try {
                return $client->status($id);
            } catch (JobNotFoundException $e) {
                if (microtime(true) > $deadline) {
                    self::fail(sprintf('the daemon did not get job %s within %.0f s', $id, $timeout));
                }
                usleep(50000);
            }
        }
    }

    protected static function metrics(): string
    {
        $text = @file_get_contents(sprintf('http://127.0.0.1:%d/metrics', (int) self::env('SIDECAR_PORT')));
        self::assertIsString($text, 'GET /metrics');
        return $text;
    }

    /**
     * Asserts that /metrics has a sample of $name with (at least) these labels and a value above 0.
     *
     * @param array<string, string> $labels
     */
    protected static function assertMetric(string $name, array $labels): void
    {
        $lines = preg_grep('/^' . preg_quote($name, '/') . '\{/', explode("\n", self::metrics())) ?: [];
        foreach ($lines as $line) {
            $all = true;
            foreach ($labels as $key => $value) {
                $all = $all && str_contains($line, sprintf('%s="%s"', $key, $value));
            }
            if ($all && (float) substr($line, strrpos($line, ' ') + 1) > 0) {
                self::assertTrue(true);
                return;
            }
        }
        self::fail(sprintf("/metrics has no %s with %s above 0; it has:\n%s", $name, json_encode($labels), implode("\n", $lines)));
    }
}
